"""Through the UI against a real embedded agent: start a simulated engine, run a load
test on it, swap it, stop it — then check what the store and the agent hold."""

from __future__ import annotations

from pathlib import Path

from textual.widgets import DataTable, Select

from tests.tui.driving import (
    live_app,
    run_smoke_load,
    stop_first_engine,
    swap_engine,
    wait_for_action,
)
from tests.tui.helpers import text_of, type_into, wait_until

NODE = "live-node"


async def test_start_load_swap_stop_simulated_engine(tmp_path: Path) -> None:
    async with live_app(tmp_path, NODE, "the embedded agent's first frame", replay_gpus=2) as live:
        app, pilot, services, client = live.app, live.pilot, live.services, live.client
        # Engines: start a simulated vLLM on GPU 1.
        await pilot.press("3")
        screen = app.screen
        screen.query_one("#kind", Select).value = "sim"
        # A profile the agent does not know: its refusal is shown in words.
        await type_into(pilot, "#model", "no-such-profile")
        await pilot.click("#start")
        await wait_for_action(pilot, "start failed", "the agent's refusal")
        status = text_of(pilot, "#action-status")
        assert "agent answered 400" in status and "no-such-profile" in status, status
        assert await client.engines() == []

        await type_into(pilot, "#model", "h100-llama2-7b-vllm")
        screen.query_one("#gpus").select(1)
        await pilot.click("#start")
        await wait_for_action(pilot, "healthy", "the engine to become healthy")
        engines = await client.engines()
        assert [(e.kind, e.simulated, e.gpu_ids) for e in engines] == [("vllm", True, (1,))]
        engine_id = engines[0].id

        # Load test: the engine appears as a target once its frames say healthy.
        await pilot.press("4")
        key = f"{NODE}/{engine_id}"
        await wait_until(
            pilot, lambda: app.screen.target_keys == [key], "the engine in the target list"
        )
        await run_smoke_load(pilot, key)
        levels_table = app.screen.query_one("#load-levels", DataTable)
        assert levels_table.row_count == 2

        runs = services.store.list_runs()
        assert len(runs) == 1
        run = runs[0]
        assert (run.engine_kind, run.node, run.deployment_id, run.simulated, run.status) == (
            "vllm",
            NODE,
            engine_id,
            True,
            "completed",
        )
        levels = services.store.levels(run.run_id)
        assert [lv.summary.concurrency for lv in levels] == [1, 2]
        assert all(lv.summary.completed == 4 and lv.summary.failed == 0 for lv in levels)
        assert all(lv.summary.output_tok_s > 0 for lv in levels)

        # Swap it for the TensorRT-LLM simulator, then stop it.
        await pilot.press("3")
        await swap_engine(pilot, "#model", "h100-llama2-7b-trtllm", timeout_s=90)
        swapped = await client.engines()
        assert [e.kind for e in swapped if e.state == "ready"] == ["trtllm"]

        await stop_first_engine(
            pilot,
            lambda: any(e.kind == "trtllm" for e in app.model.nodes[NODE].engines),
            "the swapped frame",
        )
        remaining = await client.engines()
        assert all(e.state in ("stopped",) for e in remaining), remaining
