"""Through the UI against a real agent and the real llama-server container (rig):
start, load-test, swap and stop llama.cpp, then check the store and Docker."""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path

import pytest
from textual.widgets import DataTable, Log, Select

from tests.conftest import Rig
from tests.tui.driving import (
    live_app,
    run_smoke_load,
    stop_first_engine,
    swap_engine,
    wait_for_action,
)
from tests.tui.helpers import type_into, wait_until


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
    try:
        async with live_app(
            tmp_path,
            node,
            "the agent's first frame",
            replay_gpus=1,
            allowed_images=frozenset({rig.llama_image}),
        ) as live:
            app, pilot, services, client = live.app, live.pilot, live.services, live.client
            await pilot.press("3")
            screen = app.screen
            screen.query_one("#kind", Select).value = "llamacpp"
            screen.query_one("#runtime", Select).value = "compose"
            await type_into(pilot, "#model", "/models/tiny.gguf")
            await type_into(pilot, "#context", "512")
            await pilot.click("#start")
            await wait_for_action(pilot, "healthy", "llama-server to become healthy", timeout_s=120)
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
            await wait_until(
                pilot,
                lambda: key in app.screen.target_keys,
                "the engine among the load-test targets",
            )
            await run_smoke_load(pilot, key)
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
            await swap_engine(pilot, "#context", "1024", timeout_s=120)
            live_engines = [e for e in await client.engines() if e.state == "ready"]
            assert [e.config.get("context_len") for e in live_engines] == [1024]

            await stop_first_engine(
                pilot,
                lambda: any(e.id == live_engines[0].id for e in app.model.nodes[node].engines),
                "the swapped engine's frame",
            )
            assert containers(node) == []
    finally:
        remove_leftovers(node)
