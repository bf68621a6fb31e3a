"""Comparison and regressions read back what the load generator summarised,
with energy from the real H200 NVML trace over each level's window."""

from __future__ import annotations

from pathlib import Path

import pytest

from store import RunNotFoundError, Store, StoreError
from telemetry import TelemetryFrame
from tests.store.conftest import gpu_frame, h200_levels, h200_trace, summary_from_h200

PROFILE = {"model": "Llama-2-7B class", "max_tokens": 256}
WORKLOAD = {"prompt_tokens": 500, "output_tokens": 256}


def _store_run(
    st: Store, name: str, engine: str, scale: float = 1.0, failed: int = 0, **kw: object
) -> tuple[str, list]:
    run_id = st.create_run(
        name=name,
        engine_kind=engine,
        node=kw.pop("node", "h200-1"),  # type: ignore[arg-type]
        profile=kw.pop("profile", PROFILE),  # type: ignore[arg-type]
        workload=WORKLOAD,
    )
    summaries = [summary_from_h200(i, scale, failed) for i in range(3)]
    for s in summaries:
        st.add_level(run_id, s)
    st.finish_run(run_id, "completed")
    return run_id, summaries


def _trace_frames(node: str = "h200-1") -> list[TelemetryFrame]:
    return [
        gpu_frame(
            node,
            t["t"],
            0,
            util_pct=t["util_gpu"],
            mem_used_bytes=t["mem_used"],
            power_w=t["power_mw"] / 1000,
            energy_j=t["energy_mj"] / 1000,
            temp_c=t["temp_c"],
        )
        for t in h200_trace()
    ]


def test_comparison_gives_the_load_generators_numbers(mem_store: Store) -> None:
    a, sa = _store_run(mem_store, "llama.cpp", "llamacpp")
    b, sb = _store_run(mem_store, "vllm", "vllm", scale=2.5, failed=4)
    mem_store.flush()
    c = mem_store.compare([a, b])
    assert [r.run_id for r in c.runs] == [a, b]
    assert len(c.rows) == 6
    for row, s in zip(c.rows, sa + sb, strict=True):
        assert row.concurrency == s.concurrency
        assert row.output_tok_s == s.output_tok_s
        assert row.request_s == s.request_s
        assert row.ttft_p50_s == s.ttft_s.p50
        assert row.ttft_p99_s == s.ttft_s.p99
        assert row.tpot_p50_s == s.tpot_s.p50
        assert row.failure_rate == s.failure_rate
    assert c.rows[3].failure_rate > 0
    # No telemetry stored and none in the summaries: energy is unknown, not 0.
    assert all(r.energy_j is None and r.j_per_token is None for r in c.rows)


def test_energy_per_token_from_the_gpu_energy_counter_over_each_level(mem_store: Store) -> None:
    run_id, summaries = _store_run(mem_store, "llama.cpp", "llamacpp")
    mem_store.add_telemetry(_trace_frames())
    mem_store.add_telemetry(_trace_frames(node="other-node"))  # another node: not counted
    mem_store.flush()
    rows = mem_store.compare([run_id]).rows
    trace = h200_trace()
    for row, lv, s in zip(rows, h200_levels(), summaries, strict=True):
        inside = [t for t in trace if lv["t_start"] <= t["t"] <= lv["t_end"]]
        expected_j = (inside[-1]["energy_mj"] - inside[0]["energy_mj"]) / 1000
        assert row.energy_source == "telemetry"
        assert row.energy_j == pytest.approx(expected_j)
        assert row.j_per_token == pytest.approx(expected_j / s.total_output_tokens)
        assert row.tok_per_j == pytest.approx(s.total_output_tokens / expected_j)
        assert row.mean_power_w == pytest.approx(
            sum(t["power_mw"] for t in inside) / len(inside) / 1000
        )
        assert row.mean_gpu_util_pct == pytest.approx(
            sum(t["util_gpu"] for t in inside) / len(inside)
        )
    # Energy grows with the window: 64 streams for 22 s spend more than 1 for 2 s.
    assert rows[2].energy_j > rows[0].energy_j


def test_the_levels_own_energy_wins_over_telemetry(mem_store: Store) -> None:
    import dataclasses

    run_id = mem_store.create_run(name="own", node="h200-1")
    s = dataclasses.replace(summary_from_h200(1), energy_j=1234.5, mean_power_w=400.0)
    mem_store.add_level(run_id, s)
    mem_store.add_telemetry(_trace_frames())
    mem_store.flush()
    (row,) = mem_store.compare([run_id]).rows
    assert (row.energy_j, row.energy_source, row.mean_power_w) == (1234.5, "loadgen", 400.0)


def test_regressions_between_two_runs_of_one_configuration(mem_store: Store) -> None:
    base, _ = _store_run(mem_store, "before", "vllm")
    new, _ = _store_run(mem_store, "after", "vllm", scale=0.9, failed=2)
    same, _ = _store_run(mem_store, "again", "vllm", scale=1.01)
    mem_store.flush()
    found = mem_store.regressions(base, new, threshold=0.05)
    metrics = {(g.concurrency, g.metric) for g in found}
    assert (64, "output_tok_s") in metrics
    assert (64, "ttft_p50_s") in metrics  # scale 0.9 makes TTFT 11 % longer
    assert (1, "failure_rate") in metrics  # 2 of its 4 requests failed
    tok = next(g for g in found if g.concurrency == 64 and g.metric == "output_tok_s")
    assert tok.change == pytest.approx(-0.1)
    assert mem_store.regressions(base, same, threshold=0.05) == []


def test_regressions_refuse_runs_of_different_configurations(mem_store: Store) -> None:
    a, _ = _store_run(mem_store, "a", "vllm")
    b, _ = _store_run(mem_store, "b", "sglang")
    mem_store.flush()
    with pytest.raises(StoreError, match="differ in engine_kind"):
        mem_store.regressions(a, b)


def test_run_ids_resolve_by_prefix_and_unknown_ids_say_what_to_do(mem_store: Store) -> None:
    mem_store.create_run(name="x", run_id="abc123")
    mem_store.create_run(name="y", run_id="abd999")
    mem_store.flush()
    assert mem_store.get_run("abc").run_id == "abc123"
    with pytest.raises(RunNotFoundError, match="ambiguous"):
        mem_store.get_run("ab")
    with pytest.raises(RunNotFoundError) as info:
        mem_store.compare(["abc123", "zzz"])
    assert str(info.value) == "no run zzz; `infer-top runs list` shows the ids"
    with pytest.raises(RunNotFoundError):
        mem_store.get_run("a%")  # LIKE wildcards are taken literally


def test_list_runs_filters_and_orders_newest_first(mem_store: Store) -> None:
    mem_store.create_run(name="old vllm", engine_kind="vllm", created_at=100.0)
    new = mem_store.create_run(name="new sglang", engine_kind="sglang", created_at=200.0)
    mem_store.create_run(name="newer vllm", engine_kind="vllm", node="n2", created_at=300.0)
    mem_store.finish_run(new, "failed")
    mem_store.flush()
    assert [r.name for r in mem_store.list_runs()] == ["newer vllm", "new sglang", "old vllm"]
    assert [r.name for r in mem_store.list_runs(engine_kind="vllm", limit=1)] == ["newer vllm"]
    assert [r.name for r in mem_store.list_runs(status="failed")] == ["new sglang"]
    assert [r.name for r in mem_store.list_runs(name_contains="OLD")] == ["old vllm"]


def test_settled_levels_cache_their_figures_and_late_samples_refresh_them(
    mem_store: Store,
) -> None:
    run_id, summaries = _store_run(mem_store, "llama.cpp", "llamacpp")
    mem_store.add_telemetry(_trace_frames())
    mem_store.flush()
    first = mem_store.compare([run_id]).rows
    mem_store.flush()  # the cache rows the comparison queued

    def cached_levels() -> list[int]:
        rows = mem_store._read(
            lambda c: c.execute("SELECT level_index FROM level_energy ORDER BY 1").fetchall()
        )
        return [r[0] for r in rows]

    assert cached_levels() == [0, 1, 2]  # the trace's windows ended long ago
    assert mem_store.compare([run_id]).rows == first
    # A second GPU's samples arrive late, inside the 64-stream window.
    lv = summaries[2]
    mem_store.add_telemetry(
        [
            gpu_frame("h200-1", lv.started_at + 1, 1, power_w=100.0, energy_j=1000.0),
            gpu_frame("h200-1", lv.started_at + 2, 1, power_w=100.0, energy_j=1500.0),
        ]
    )
    mem_store.flush()
    assert cached_levels() == [0, 1]
    again = mem_store.compare([run_id]).rows
    assert again[:2] == first[:2]
    assert again[2].energy_j == pytest.approx(first[2].energy_j + 500.0)


def test_a_cache_row_computed_from_fewer_samples_than_stored_is_not_written(
    mem_store: Store,
) -> None:
    from store.energy import CACHE_SQL

    run_id, summaries = _store_run(mem_store, "llama.cpp", "llamacpp")
    mem_store.add_telemetry(_trace_frames())
    mem_store.flush()
    lv = summaries[0]
    window = ("h200-1", lv.started_at, lv.ended_at)
    stale = (run_id, 0, *window, "", 3, 1.0, 1.0, 1.0, *window, 3)  # 3 != samples stored
    mem_store._writer.put_rows(CACHE_SQL, [stale])
    mem_store.flush()
    count = mem_store._read(lambda c: c.execute("SELECT count(*) FROM level_energy").fetchone())
    assert count == (0,)


def test_comparing_runs_whose_workloads_differ_by_over_5_percent_warns(tmp_path: Path) -> None:
    """Runs of 128 and 575 prompt tokens compared as if they were one test."""
    from dataclasses import replace as with_

    from runs.records import Percentiles
    from store import open_store

    with open_store(tmp_path / "runs.db") as st:
        for run_id, prompt in (("small", 128.0), ("large", 575.0), ("near", 131.0)):
            st.create_run(run_id=run_id, name=run_id, engine_kind="vllm", created_at=1.0)
            level = with_(
                summary_from_h200(0),
                input_sent=Percentiles(p50=prompt, p99=prompt, mean=prompt),
                output_sent=Percentiles(p50=64.0, p99=64.0, mean=64.0),
            )
            st.add_level(run_id, level)
        st.flush()
        (warning,) = st.compare(["small", "large"]).warnings
        assert "differ by 349% in input tokens per request" in warning
        assert "small 128, large 575" in warning
        assert st.compare(["small", "near"]).warnings == ()
