"""``infer-top bench --workers N``: one run over N load-generator processes, its
percentiles computed from every worker's records (issue 19, point 6)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from loadgen import ClosedLoop
from loadgen.stats import summarise_level
from store import open_store
from tests.loadgen.conftest import bench

SPREAD = ("--ttft-ms", "5", "--ttft-spread-ms", "60", "--itl-ms", "3")


async def test_two_workers_make_one_run_with_percentiles_of_all_records(
    sched_server: Callable[..., Any], tmp_path: Path
) -> None:
    """Two processes send one stored run: every request once, and each level's stored
    summary (TTFT, ITL, E2E percentiles and means) is exactly the one recomputed from all
    stored records, not an average of the two workers' figures."""
    server = sched_server(*SPREAD)
    db = tmp_path / "runs.db"
    code, _, err = await bench(
        "--url", server.url, "--model", "m", "--concurrency", "4,8", "--requests", "48",
        "--input-len", "8", "--output-len", "6", "--workers", "2",
        "--save", "--db", str(db),
    )  # fmt: skip
    assert code == 0, err
    truth = server.truth()["requests"]
    with open_store(db) as st:
        (run,) = st.list_runs()
        assert run.status == "completed", run.status_reason
        stored = list(st.iter_requests(run.run_id))
        levels = [row.summary for row in st.levels(run.run_id)]
    assert len(stored) == 96 == len(truth)  # every request once, from both workers
    assert {r.request_index % 2 for r in stored} == {0, 1}
    assert all(r.load_node is None for r in stored)
    for index, concurrency in enumerate((4, 8)):
        mine = [r for r in stored if r.level_index == index]
        recomputed = summarise_level(index, ClosedLoop(concurrency), mine, None)
        assert levels[index] == recomputed
        assert levels[index].completed == 48


async def test_workers_refuse_a_level_too_small_to_split(tmp_path: Path) -> None:
    code, _, err = await bench(
        "--url", "http://127.0.0.1:9", "--concurrency", "1", "--workers", "2"
    )
    assert code == 2 and "--workers 2" in err and "concurrency 1" in err
