"""The real load generator saves two runs against a real HTTP server; the
store's comparison gives the numbers the load generator itself reported."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from store import open_store
from tests.loadgen.sched_server import SchedServer
from tui.cli import main


@pytest.fixture
def server() -> Iterator[SchedServer]:
    srv = SchedServer("--ttft-ms", "5", "--ttft-spread-ms", "5", "--itl-ms", "2")
    yield srv
    srv.stop()


def test_comparison_equals_the_load_generators_summary(server: SchedServer, tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    reports = []
    for name in ("first", "second"):
        out = tmp_path / f"{name}.json"
        argv = ["bench", "--url", server.url, "--model", "m", "--engine", "vllm",
                "--concurrency", "1,4", "--requests", "8", "--input-len", "16",
                "--output-len", "8", "--save", "--db", str(db), "--name", name,
                "--json", str(out), "--quiet"]  # fmt: skip
        assert main(argv) == 0
        reports.append(json.loads(out.read_text()))
    with open_store(db) as st:
        runs = {r.name: r.run_id for r in st.list_runs()}
        comparison = st.compare([runs["first"], runs["second"]])
    assert len(comparison.rows) == 4
    expected = [lv for report in reports for lv in report["levels"]]
    for row, lv in zip(comparison.rows, expected, strict=True):
        assert row.concurrency == lv["concurrency"]
        assert row.output_tok_s == lv["output_tok_s"]
        assert row.request_s == lv["request_s"]
        assert row.ttft_p50_s == lv["ttft_s"]["p50"]
        assert row.ttft_p99_s == lv["ttft_s"]["p99"]
        assert row.tpot_p50_s == lv["tpot_s"]["p50"]
        assert row.failure_rate == lv["failure_rate"]
        assert row.output_tok_s > 0
