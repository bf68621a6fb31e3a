"""Store test helpers: real RequestRecords / LevelSummaries shaped like the
load generator's, built from the H200 llama.cpp run in tests/fixtures."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runs.records import ErrorKind, LevelSummary, Percentiles, RequestRecord
from store import Store, open_store
from telemetry import GpuSample, HostSample, TelemetryFrame

FIXTURES = Path(__file__).parents[1] / "fixtures"
H200 = FIXTURES / "h200-llamacpp"


def h200_levels() -> list[dict[str, float]]:
    levels: list[dict[str, float]] = json.loads((H200 / "load-levels.json").read_text())
    return levels


def h200_trace() -> list[dict[str, float]]:
    trace: list[dict[str, float]] = json.loads((H200 / "nvml-trace.json").read_text())["trace"]
    return trace


def gpu_frame(node: str, ts: float, index: int, **values: Any) -> TelemetryFrame:
    """A frame carrying one GPU's values, as an agent sends it."""
    gpu = GpuSample(index=index, name="NVIDIA H200", **values)
    return TelemetryFrame(node=node, seq=0, ts=ts, host=HostSample(), gpus=(gpu,))


def record(
    run_id: str, level: int, index: int, t0: float = 1000.0, **changes: object
) -> RequestRecord:
    sent = t0 + index * 0.01
    values: dict[str, object] = dict(
        run_id=run_id,
        level_index=level,
        request_index=index,
        scheduled_at=sent - 0.001,
        sent_at=sent,
        first_token_at=sent + 0.05,
        end_at=sent + 0.5,
        prompt_tokens=128,
        output_tokens=64,
        usage_completion_tokens=64,
        counted_output_tokens=63,
        chunk_count=63,
        itl_s=tuple(0.007 + k * 1e-6 for k in range(62)),
        tokens_per_chunk=(2,) + (1,) * 62,
    )
    values.update(changes)
    return RequestRecord(**values)  # type: ignore[arg-type]


def failed_record(run_id: str, level: int, index: int) -> RequestRecord:
    return record(
        run_id,
        level,
        index,
        first_token_at=None,
        end_at=None,
        output_tokens=0,
        usage_completion_tokens=None,
        counted_output_tokens=0,
        chunk_count=0,
        itl_s=(),
        tokens_per_chunk=(),
        error_kind=ErrorKind.HTTP_STATUS,
        http_status=503,
        error_message="server busy",
    )


def summary_from_h200(i: int, scale: float = 1.0, failed: int = 0) -> LevelSummary:
    """The real H200 level ``i`` as the load generator would summarise it."""
    lv = h200_levels()[i]
    span = lv["t_end"] - lv["t_start"]
    n = int(lv["requests"])
    ttft = Percentiles(
        p50=lv["ttft_p50_ms"] / 1000 / scale,
        p90=lv["ttft_p99_ms"] / 1000 * 0.9 / scale,
        p95=lv["ttft_p99_ms"] / 1000 * 0.95 / scale,
        p99=lv["ttft_p99_ms"] / 1000 / scale,
        p999=lv["ttft_p99_ms"] / 1000 / scale,
        mean=lv["ttft_p50_ms"] / 1000 * 1.01 / scale,
    )
    tok_s = lv["output_tok_per_s"] * scale
    return LevelSummary(
        level_index=i,
        concurrency=int(lv["concurrency"]),
        request_rate=None,
        started_at=lv["t_start"],
        ended_at=lv["t_end"],
        completed=n - failed,
        failed=failed,
        incomplete=0,
        output_tok_s=tok_s,
        total_tok_s=tok_s * 1.4,
        request_s=n / span * scale,
        achieved_rate=n / span,
        goodput_req_s=None,
        ttft_s=ttft,
        tpot_s=Percentiles(p50=0.0041, p99=0.0093, mean=0.0045),
        itl_s=Percentiles(p50=0.004, p90=0.006, p95=0.007, p99=0.011, p999=0.02, mean=0.0043),
        e2e_s=Percentiles(p50=1.2, p99=1.9),
        ttft_from_schedule_s=ttft,
        failures_by_kind={"http_status": failed} if failed else {},
        total_output_tokens=int(tok_s * span),
        total_prompt_tokens=n * 500,
        usage_mismatches=1,
    )


def cap_file_bytes(st: Store, max_bytes: int | None) -> None:
    """Make the store's file full past ``max_bytes`` (SQLite's max_page_count; None
    lifts the cap), as a full disk would, on the writer's connection after every
    row queued before: rows held after "database or disk is full" retry under it."""

    def cap(conn: sqlite3.Connection) -> None:
        page_size = int(conn.execute("PRAGMA page_size").fetchone()[0])
        pages = 4_294_967_294 if max_bytes is None else max(1, max_bytes // page_size)
        conn.execute(f"PRAGMA max_page_count = {pages}")

    st._writer.call(cap).result()


@pytest.fixture
def mem_store() -> Iterator[Store]:
    st = open_store(":memory:")
    yield st
    st.close()


@pytest.fixture
def file_store(tmp_path: Path) -> Iterator[Store]:
    """A store in a file, for tests that read it back with another connection."""
    st = open_store(tmp_path / "store.db")
    yield st
    st.close()
