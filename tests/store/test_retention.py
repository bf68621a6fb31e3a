"""Reads beside the writer; retention deletes old telemetry taken outside runs."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

from store import Store, open_store
from telemetry import EngineTelemetry, GpuSample, HostSample, TelemetryFrame
from tests.store.conftest import record


def test_reads_see_committed_rows_while_the_writer_holds_a_transaction(tmp_path: Path) -> None:
    # WAL: a reader is not blocked by an open write transaction.
    path = tmp_path / "wal.db"
    st = open_store(path)
    run_id = st.create_run(name="seen")
    st.flush()
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    other.execute("INSERT INTO events (ts, node, kind) VALUES (1, 'n', 'start')")
    try:
        assert st.get_run(run_id).name == "seen"
    finally:
        other.execute("ROLLBACK")
        other.close()
    st.close()


def _samples(node: str, start: float, n: int) -> list[TelemetryFrame]:
    return [
        TelemetryFrame(
            node=node,
            seq=k,
            ts=start + k,
            host=HostSample(),
            gpus=(GpuSample(0, "gpu", util_pct=50.0 + k % 2, power_w=100.0, energy_j=k * 100.0),),
            engines=(EngineTelemetry("e1", "vllm", "ready", "healthy", kv_cache_usage=0.5),),
        )
        for k in range(n)
    ]


def gpu_sample_times(st: Store) -> list[float]:
    rows = st._read(lambda c: c.execute("SELECT ts FROM gpu_samples ORDER BY ts").fetchall())
    return [ts for (ts,) in rows]


def test_prune_keeps_samples_inside_runs_and_recent_ones() -> None:
    mem_store = open_store(":memory:", telemetry_retention_s=None)  # prune by hand here
    now = time.time()
    old = now - 10 * 86400
    minute = (old // 60) * 60
    mem_store.add_telemetry(_samples("n1", minute, 120))  # two idle minutes, 10 days ago
    run_start = minute + 1000
    run_id = mem_store.create_run(name="r", node="n1", created_at=run_start)
    mem_store.finish_run(run_id, at=run_start + 30)
    mem_store.add_telemetry(_samples("n1", run_start, 30))  # during the run: kept
    mem_store.add_telemetry(_samples("n1", now - 60, 30))  # recent: kept
    mem_store.flush()
    result = mem_store.prune_telemetry(older_than_s=7 * 86400)
    assert (result.gpu_samples_deleted, result.engine_samples_deleted) == (120, 120)
    kept = gpu_sample_times(mem_store)
    assert kept == [run_start + k for k in range(30)] + [now - 60 + k for k in range(30)]
    again = mem_store.prune_telemetry(older_than_s=7 * 86400)  # nothing more to delete
    assert (again.gpu_samples_deleted, again.engine_samples_deleted) == (0, 0)
    mem_store.close()


def test_vacuum_shrinks_the_file_after_a_delete(tmp_path: Path) -> None:
    st = open_store(tmp_path / "v.db")
    run_id = st.create_run(name="big")
    st.add_requests(record(run_id, 0, i) for i in range(5000))
    st.flush()
    assert st.delete_run(run_id) == 5000
    before, after = st.vacuum()
    assert after < before / 4
    assert st.list_runs() == []
    st.close()


def test_configured_retention_runs_while_telemetry_comes_in(tmp_path: Path) -> None:
    st = open_store(tmp_path / "r.db", telemetry_retention_s=86400)
    two_days_ago = (time.time() - 2 * 86400) // 60 * 60
    st.add_telemetry(_samples("n1", two_days_ago, 30))  # the first add runs the check
    recent = time.time() - 5
    st.add_telemetry(_samples("n1", recent, 1))  # the hourly check already ran
    st.flush()
    assert gpu_sample_times(st) == [recent]
    st.close()
    keep_all = open_store(tmp_path / "k.db", telemetry_retention_s=None)
    keep_all.add_telemetry(_samples("n1", two_days_ago, 30))
    keep_all.flush()
    assert len(gpu_sample_times(keep_all)) == 30
    keep_all.close()
