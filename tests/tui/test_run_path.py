"""One run path, through the UI: the same small sweep run from the TUI's Load screen,
from ``infer-top bench --save`` and by the demo's writer is stored alike and the TUI
run compares with the CLI run for regressions (docs/design.md, "The run path")."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from pathlib import Path
from typing import Any

from control.demo_runs import SweepShape, simulate_run
from control.loads import profile, run_load
from store import open_store
from store.queries import REGRESSION_METRICS, measured_workload
from tests.loadgen.conftest import bench
from tests.tui.conftest import SIZE, engines_at_load, fleet_frames, frozen_app, frozen_services
from tests.tui.driving import live_app, run_smoke_load
from tests.tui.helpers import text_of, wait_until

NODE = "run-path-node"
SIM_PROFILE = "h100-llama2-7b-vllm"


def _rows(db: Path, table: str, run_id: str) -> int:
    """Rows of ``run_id`` in ``table``, read as another program would."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        column = "id" if table == "runs" else "run_id"
        sql = f"SELECT count(*) FROM {table} WHERE {column} = ?"
        return int(conn.execute(sql, (run_id,)).fetchone()[0])
    finally:
        conn.close()


async def test_a_sweep_from_the_tui_from_bench_and_from_the_demo_is_stored_alike(
    tmp_path: Path,
) -> None:
    smoke = profile("smoke")  # concurrency 1,2 x 4 requests, 32 in / 16 out
    async with live_app(tmp_path, NODE, "the embedded agent's first frame", replay_gpus=2) as live:
        app, pilot, store = live.app, live.pilot, live.services.store
        engine = await live.client.start("sim", {"profile": SIM_PROFILE}, [1], runtime="sim")
        assert engine.url and engine.health == "healthy", engine

        # (a) the TUI: the Load screen's smoke profile against the simulated engine.
        await pilot.press("4")
        key = f"{NODE}/{engine.id}"
        await wait_until(pilot, lambda: key in app.screen.target_keys, "the engine as a target")
        await run_smoke_load(pilot, key)
        (tui,) = store.list_runs()
        # the simulator tokenizes as the engine it imitates does: prompts are sized in its
        # tokens (its template measured), so what it counted is what was asked, no warning
        shown = " ".join(text_of(pilot, "#load-status").split())
        assert "finished and saved" in shown and "warning" not in shown, shown
        (first,) = [lv.summary for lv in store.levels(tui.run_id)][:1]
        assert first.input_sent == first.input_requested, first

        # (b) the CLI: the same numbers, as a real `infer-top bench --save` process.
        code, _out, err = await bench(
            "--url", engine.url, "--model", tui.profile["target"]["model"], "--engine", "vllm",
            "--concurrency", "1,2", "--requests", str(smoke.requests_per_level),
            "--input-len", str(smoke.input_len), "--output-len", str(smoke.output_len),
            "--save", "--db", str(tmp_path / "runs.db"),
        )  # fmt: skip
        assert code == 0, err
        (cli,) = [r for r in store.list_runs() if r.run_id != tui.run_id]

        # (c) the demo's writer: the same sweep, simulated in virtual time.
        shape = SweepShape(
            concurrency=smoke.concurrency,
            prompt_tokens=smoke.input_len,
            output_tokens=smoke.output_len,
            min_requests=smoke.requests_per_level,
            requests_per_client=0,
            range_ratio=0.0,
        )
        demo_id = await asyncio.to_thread(
            simulate_run, store, SIM_PROFILE, node=NODE, shape=shape, start_epoch=time.time()
        )
        await asyncio.to_thread(store.flush)
        demo = store.get_run(demo_id)

        runs = {"tui": tui, "bench": cli, "demo": demo}
        for origin, run in runs.items():
            assert run.profile["origin"] == origin
            assert (run.status, run.simulated, run.engine_kind) == ("completed", True, "vllm")
            assert (run.level_count, run.request_count) == (2, 8), origin
            requests = list(store.iter_requests(run.run_id))
            assert [(r.level_index, r.run_id) for r in requests] == [
                (level, run.run_id) for level in (0, 1) for _ in range(4)
            ]
            for table, rows in (("runs", 1), ("levels", 2), ("requests", 8)):
                assert _rows(tmp_path / "runs.db", table, run.run_id) == rows, (origin, table)
        # One profile schema whoever started the run; one configuration for the same numbers.
        assert len({tuple(r.profile) for r in runs.values()}) == 1
        assert len({tuple(r.profile["target"]) for r in runs.values()}) == 1
        assert tui.profile["spec"] == cli.profile["spec"] == demo.profile["spec"]
        assert measured_workload(tui.workload) == measured_workload(cli.workload)
        assert measured_workload(cli.workload) == measured_workload(demo.workload)
        assert tui.workload["salt"] != cli.workload["salt"]  # each drew fresh prompts
        assert tui.profile["target"]["model"] == cli.profile["target"]["model"]
        # The TUI run names its engine's deployment: energy over its window sums GPU 1 only.
        assert tui.deployment_id == engine.id and tui.node == NODE
        deployment = store._read(
            lambda c: c.execute(
                "SELECT gpus_json, simulated FROM deployments WHERE node = ? AND id = ?",
                (NODE, engine.id),
            ).fetchall()
        )
        assert deployment == [("[1]", 1)]

        # The TUI run and the CLI run compare level by level, and for regressions.
        rows = store.compare([tui.run_id, cli.run_id]).rows
        assert [(r.run_id, r.concurrency) for r in rows] == [
            (run_id, c) for run_id in (tui.run_id, cli.run_id) for c in (1, 2)
        ]
        assert all(r.output_tok_s > 0 and r.failure_rate == 0 for r in rows)
        found = store.regressions(tui.run_id, cli.run_id, threshold=0.05)  # no "differ in"
        metrics = {name for name, _ in REGRESSION_METRICS}
        assert all(g.metric in metrics and g.concurrency in (1, 2) for g in found)
        assert store.regressions(tui.run_id, cli.run_id, threshold=100.0) == []


async def test_a_tui_run_whose_every_request_failed_is_shown_and_stored_as_failed(
    tmp_path: Path,
) -> None:
    """The engine refused every request (nothing listens at its URL); the Load screen
    said "finished and saved" and History filed it as completed."""
    store = open_store(tmp_path / "runs.db")
    try:
        app = frozen_app(frozen_services(store=store, load_runner=run_load))
        async with app.run_test(size=SIZE) as pilot:
            for frame in fleet_frames("h200-0", 2, range(5), engines_at_load()):
                app.ingest("h200-0", frame)
            await pilot.press("4")
            screen: Any = app.screen
            await wait_until(pilot, lambda: bool(screen.target_keys), "the healthy engine")
            screen.query_one("#target").value = "h200-0/vllm-a"  # at 127.0.0.1:9
            screen.query_one("#profile").value = "smoke"
            screen.query_one("#load-from").value = "here"  # no agent here: its own URL
            await pilot.click("#run")
            await wait_until(
                pilot,
                lambda: "load test failed" in text_of(pilot, "#load-status"),
                "the load test to end",
                timeout_s=120,
            )
            status = text_of(pilot, "#load-status")
        assert "all 8 requests failed: connect 8" in status, status
        (run,) = store.list_runs()
        assert run.status == "failed", run
        assert (run.status_reason or "").startswith("all 8 requests failed: connect 8 — "), run
        assert run.request_count == 8 and run.profile["origin"] == "tui"
    finally:
        store.close()
