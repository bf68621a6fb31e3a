"""The Compare screen's full curves: every level of every run with its latency, failure,
goodput, GPU, KV-cache, power, energy and cost figures (``l``), and the same HTML report
``infer-top report`` writes (``h``).

No GPU here: the run's GPU frames are the real H200 recording (``tests/tui/replay_frames``)
presented as measured, stored as a load test stores them (``Store.add_telemetry``)."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Any

from textual.widgets import DataTable, SelectionList

from control.cost import Prices
from control.loads import profile
from control.report_data import build_report
from control.report_html import render_html
from loadgen import Target, describe_run
from runs.events import LevelFinished, RunFinished, RunResult, RunStarted
from store import RunRecorder, open_store
from telemetry import EngineTelemetry
from tests.tui.conftest import (
    EPOCH,
    SIZE,
    engines_at_load,
    fleet_frames,
    frozen_app,
    frozen_services,
)
from tests.tui.helpers import text_of, wait_until

NODE, ENGINE = "gpu-node", "vllm-a"
START, END = EPOCH + 10, EPOCH + 40
"""The level's window: the frames cover EPOCH .. EPOCH + 59."""


def kv_at(second: int) -> float:
    """The engine's KV-cache usage: 0.9 after the window (must not count), rising within."""
    return 0.9 if second > 45 else 0.2 + second / 100


def measured_run(store: Any, seed_level: Any) -> str:
    smoke = profile("smoke")
    setup = describe_run(
        smoke.spec(), smoke.workload(), Target("http://127.0.0.1:9", "m", "vllm"),
        origin="tui", node=NODE, deployment_id=ENGINE, gpu_ids=(1,),
    )  # fmt: skip
    level = replace(seed_level, started_at=START, ended_at=END, energy_j=None)
    recorder = RunRecorder(store)
    recorder.on_event(RunStarted("run-measured", 1, (), setup, START))
    engine: EngineTelemetry = replace(engines_at_load()[0], simulated=False)
    frames = [
        replace(
            frame,
            simulated=False,
            platform="nvidia",
            engines=(replace(engine, kv_cache_usage=kv_at(second)),),
        )
        for second, frame in enumerate(fleet_frames(NODE, 2, range(60)))
    ]
    store.add_telemetry(frames)
    recorder.on_event(LevelFinished(level))
    recorder.on_event(RunFinished(RunResult("run-measured", START, END, (level,), (), 0)))
    store.flush()
    return "run-measured"


def expected_peaks(store: Any) -> tuple[int, float]:
    """GPU 1's memory in use at its highest within the window, read from the samples."""
    ((mem,),) = store._read(
        lambda c: c.execute(
            "SELECT max(mem_used_bytes) FROM gpu_samples WHERE node = ? AND gpu_index = 1 "
            "AND ts BETWEEN ? AND ?",
            (NODE, START, END),
        ).fetchall()
    )
    kv = max(kv_at(s) for s in range(60) if START <= EPOCH + s <= END)
    return mem, kv


def cells(table: DataTable[Any], key: str) -> dict[str, str]:
    headers = [str(c.label) for c in table.columns.values()]
    return dict(zip(headers, (str(v) for v in table.get_row(key)), strict=True))


async def test_levels_show_gpu_memory_kv_power_energy_and_cost_of_each_level(
    tmp_path: Path, seed_store: Any
) -> None:
    seed_level = seed_store.levels("seed02-h100-llama2-7b-vllm")[-1].summary
    store = open_store(tmp_path / "measured.db")  # the seed's is runs.db
    try:
        run_id = measured_run(store, seed_level)
        mem, kv = expected_peaks(store)
        [row] = store.compare([run_id]).rows
        assert (row.peak_gpu_mem_bytes, row.kv_cache_peak) == (mem, kv)
        app = frozen_app(frozen_services(store=store, exports_dir=tmp_path))
        app.config = replace(app.config, prices=Prices(flat_hourly=4.0))
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("5")
            levels = app.screen.query_one("#compare-levels", DataTable)
            await wait_until(pilot, lambda: levels.row_count == 1, "the run's level")
            assert not levels.display  # the summary shows first
            await pilot.press("l")
            await wait_until(pilot, lambda: levels.display, "the levels table")
            assert "every level of every run" in text_of(pilot, "#compare-title")
            shown = cells(levels, f"{run_id}:{seed_level.level_index}")
    finally:
        store.close()
    assert shown["level"] == f"c={seed_level.concurrency}"
    assert shown["GPU mem peak GiB"] == f"{mem / 2**30:,.1f}"
    assert shown["KV peak %"] == f"{kv * 100:,.1f}"
    assert shown["ITL p99 ms"] == f"{seed_level.itl_s.p99 * 1000:,.2f}"
    assert shown["E2E p99 ms"] == f"{seed_level.e2e_s.p99 * 1000:,.1f}"
    assert shown["goodput req/s"] != "n/a" or seed_level.goodput_req_s is None
    assert shown["tok/J"] == f"{row.tok_per_j:,.2f}" and row.tok_per_j
    assert shown["power W"] == f"{row.mean_power_w:,.1f}"
    # $4 an hour over the level's output tok/s, per million output tokens
    assert shown["USD/M out tok"] == f"{4.0 / (3600 * row.output_tok_s) * 1e6:,.3f}"


async def test_levels_of_the_seed_runs_equal_the_store(seed_store: Any) -> None:
    app = frozen_app(frozen_services(store=seed_store))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("5", "l")
        levels = app.screen.query_one("#compare-levels", DataTable)
        await wait_until(pilot, lambda: levels.row_count == 35, "five runs' seven levels")
        for run in seed_store.list_runs():
            for lv in seed_store.levels(run.run_id):
                s = lv.summary
                shown = cells(levels, f"{run.run_id}:{s.level_index}")
                assert shown["output tok/s"] == f"{s.output_tok_s:,.1f}"
                assert shown["TTFT p99 ms"] == f"{s.ttft_s.p99 * 1000:,.1f}"
                assert shown["TPOT p50 ms"] == f"{s.tpot_s.p50 * 1000:,.2f}"
                assert shown["failed %"] == f"{s.failure_rate * 100:,.1f}"
                # no GPU telemetry stored with the seed runs: n/a, never 0
                assert shown["GPU mem peak GiB"] == shown["KV peak %"] == "n/a"


async def test_h_writes_the_report_infer_top_report_writes(seed_store: Any, tmp_path: Path) -> None:
    app = frozen_app(frozen_services(store=seed_store, exports_dir=tmp_path))
    said: list[str] = []
    notify = app.notify

    def noting(message: str, **kw: Any) -> None:
        said.append(message)
        notify(message, **kw)

    app.notify = noting  # type: ignore[method-assign]
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("5")
        table = app.screen.query_one("#compare-table", DataTable)
        await wait_until(pilot, lambda: table.row_count == 5, "the five seed runs")
        picked = list(app.screen.query_one("#pick", SelectionList).selected)
        await pilot.press("h")
        await wait_until(pilot, lambda: any("exported to" in s for s in said), "the notice")
    [path] = reports(tmp_path)
    assert said == [f"exported to {path}"]
    html = path.read_text()
    # the same document the CLI renders for these runs (the moment it was made aside)
    expected = render_html(build_report(seed_store, picked, Prices()))
    assert without_made(html) == without_made(expected)
    assert "<svg" in html and "Simulated numbers" in html


def reports(folder: Path) -> list[Path]:
    return list(folder.glob("compare-*.html"))


def without_made(html: str) -> str:
    return re.sub(r'<p class="made">.*?</p>', "", html)
