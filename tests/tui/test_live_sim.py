"""Through the UI against a real embedded agent: start a simulated engine, run a load
test on it, swap it, stop it — then check what the store and the agent hold."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from textual.widgets import DataTable, Select

from agents.embedded import embedded_config
from tests.tui.conftest import SIZE
from tests.tui.helpers import text_of, type_into, wait_until
from tui.app import create_app
from tui.config import Config
from tui.model import NodeStatus
from tui.wiring import build_services

NODE = "live-node"


async def test_start_load_swap_stop_simulated_engine(tmp_path: Path) -> None:
    config = Config(db_path=tmp_path / "runs.db")
    agent = embedded_config(
        platform="replay",
        replay_gpus=2,
        node_name=NODE,
        state_dir=tmp_path / "agent",
        adopt_on_start=False,
    )
    async with build_services(config, agent_config=agent) as services:
        app = create_app(config, services=services)
        client: Any = services.nodes[0].client
        async with app.run_test(size=SIZE) as pilot:
            await wait_until(
                pilot,
                lambda: app.model.nodes[NODE].status is NodeStatus.OK,
                "the embedded agent's first frame",
            )
            # Engines: start a simulated vLLM on GPU 1.
            await pilot.press("3")
            screen = app.screen
            screen.query_one("#kind", Select).value = "sim"
            # A profile the agent does not know: its refusal is shown in words.
            await type_into(pilot, "#model", "no-such-profile")
            await pilot.click("#start")
            await wait_until(
                pilot,
                lambda: "start failed" in text_of(pilot, "#action-status"),
                "the agent's refusal",
            )
            status = text_of(pilot, "#action-status")
            assert "agent answered 400" in status and "no-such-profile" in status, status
            assert await client.engines() == []

            await type_into(pilot, "#model", "h100-llama2-7b-vllm")
            screen.query_one("#gpus").select(1)
            await pilot.click("#start")
            await wait_until(
                pilot,
                lambda: "healthy" in text_of(pilot, "#action-status"),
                "the engine to become healthy",
            )
            engines = await client.engines()
            assert [(e.kind, e.simulated, e.gpu_ids) for e in engines] == [("vllm", True, (1,))]
            engine_id = engines[0].id

            # Load test: the engine appears as a target once its frames say healthy.
            await pilot.press("4")
            key = f"{NODE}/{engine_id}"
            await wait_until(
                pilot, lambda: app.screen.target_keys == [key], "the engine in the target list"
            )
            app.screen.query_one("#target", Select).value = key
            app.screen.query_one("#profile", Select).value = "smoke"
            await pilot.click("#run")
            await wait_until(
                pilot,
                lambda: "finished and saved" in text_of(pilot, "#load-status"),
                "the load test to finish",
                timeout_s=120,
            )
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
            await wait_until(
                pilot,
                lambda: app.screen.query_one("#engine-table", DataTable).row_count == 1,
                "the engine in the node's table",
            )
            await type_into(pilot, "#model", "h100-llama2-7b-trtllm")
            await pilot.click("#swap")
            await wait_until(
                pilot,
                lambda: "swap done" in text_of(pilot, "#action-status"),
                "the swap",
                timeout_s=90,
            )
            swapped = await client.engines()
            assert [e.kind for e in swapped if e.state == "ready"] == ["trtllm"]

            await wait_until(
                pilot,
                lambda: any(e.kind == "trtllm" for e in app.model.nodes[NODE].engines),
                "the swapped frame",
            )
            app.redraw_now()
            await pilot.pause()
            app.screen.query_one("#engine-table", DataTable).move_cursor(row=0)
            await pilot.click("#stop")
            await wait_until(
                pilot, lambda: "stop done" in text_of(pilot, "#action-status"), "the stop"
            )
            remaining = await client.engines()
            assert all(e.state in ("stopped",) for e in remaining), remaining
