"""Through the UI against a real agent and the real llama-server container (rig):
start, load-test, swap and stop llama.cpp, then check the store and Docker."""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest
from textual.widgets import DataTable, Log, Select

from agents.embedded import embedded_config
from tests.conftest import Rig
from tests.tui.conftest import SIZE
from tests.tui.helpers import text_of, type_into, wait_until
from tui.app import create_app
from tui.config import Config
from tui.model import NodeStatus
from tui.wiring import build_services


def containers(node: str) -> list[str]:
    out = subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"label=org.infer-top.node={node}"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return out.stdout.split()


def remove_leftovers(node: str) -> None:
    leftover = containers(node)
    if leftover:
        subprocess.run(["docker", "rm", "-f", *leftover], capture_output=True, timeout=60)


@pytest.mark.docker
async def test_llama_server_start_load_swap_stop(rig: Rig, tmp_path: Path) -> None:
    node = f"tui-docker-{uuid.uuid4().hex[:8]}"
    config = Config(db_path=tmp_path / "runs.db")
    agent = embedded_config(
        platform="replay",
        replay_gpus=1,
        node_name=node,
        state_dir=tmp_path / "agent",
        adopt_on_start=False,
        allowed_images=frozenset({rig.llama_image}),
    )
    try:
        async with build_services(config, agent_config=agent) as services:
            app = create_app(config, services=services)
            client: Any = services.nodes[0].client
            async with app.run_test(size=SIZE) as pilot:
                await wait_until(
                    pilot,
                    lambda: app.model.nodes[node].status is NodeStatus.OK,
                    "the agent's first frame",
                )
                await pilot.press("3")
                screen = app.screen
                screen.query_one("#kind", Select).value = "llamacpp"
                screen.query_one("#runtime", Select).value = "compose"
                await type_into(pilot, "#model", "/models/tiny.gguf")
                await type_into(pilot, "#context", "512")
                await pilot.click("#start")
                await wait_until(
                    pilot,
                    lambda: "healthy" in text_of(pilot, "#action-status"),
                    "llama-server to become healthy",
                    timeout_s=120,
                )
                (engine,) = await client.engines()
                assert (engine.kind, engine.runtime, engine.simulated) == (
                    "llamacpp",
                    "compose",
                    False,
                )
                assert len(containers(node)) == 1

                # Node screen: follow the container's log
                await pilot.press("2")
                engines_table = app.screen.query_one("#node-engines", DataTable)
                await wait_until(pilot, lambda: engines_table.row_count == 1, "the engine row")
                engines_table.focus()
                await pilot.press("f")
                log = app.screen.query_one("#engine-log", Log)
                await wait_until(
                    pilot,
                    lambda: any("server" in line for line in log.lines),
                    "llama-server's log lines",
                    timeout_s=30,
                )

                await pilot.press("4")
                key = f"{node}/{engine.id}"
                target = app.screen.query_one("#target", Select)
                await wait_until(
                    pilot,
                    lambda: key in app.screen.target_keys,
                    "the engine among the load-test targets",
                )
                target.value = key
                app.screen.query_one("#profile", Select).value = "smoke"
                await pilot.click("#run")
                await wait_until(
                    pilot,
                    lambda: "finished and saved" in text_of(pilot, "#load-status"),
                    "the load test",
                    timeout_s=120,
                )
                (run,) = services.store.list_runs()
                assert (run.engine_kind, run.node, run.simulated, run.status) == (
                    "llamacpp",
                    node,
                    False,
                    "completed",
                )
                levels = services.store.levels(run.run_id)
                assert [lv.summary.concurrency for lv in levels] == [1, 2]
                assert sum(lv.summary.completed for lv in levels) == 8
                assert all(lv.summary.failed == 0 for lv in levels)

                await pilot.press("3")
                table = app.screen.query_one("#engine-table", DataTable)
                await wait_until(pilot, lambda: table.row_count == 1, "the engine row")
                await type_into(pilot, "#context", "1024")
                await pilot.click("#swap")
                await wait_until(
                    pilot,
                    lambda: "swap done" in text_of(pilot, "#action-status"),
                    "the swap",
                    timeout_s=120,
                )
                live = [e for e in await client.engines() if e.state == "ready"]
                assert [e.config.get("context_len") for e in live] == [1024]

                await wait_until(
                    pilot,
                    lambda: any(e.id == live[0].id for e in app.model.nodes[node].engines),
                    "the swapped engine's frame",
                )
                app.redraw_now()
                await pilot.pause()
                table.move_cursor(row=0)
                await pilot.click("#stop")
                await wait_until(
                    pilot,
                    lambda: "stop done" in text_of(pilot, "#action-status"),
                    "the stop",
                    timeout_s=60,
                )
                assert containers(node) == []
    finally:
        remove_leftovers(node)
