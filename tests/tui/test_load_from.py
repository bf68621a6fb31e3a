"""The Load screen generates a run on the engine's node by default and, when told,
from here through the agent; each time it says which, and the store keeps it (the
multi-host proof on a real llama-server is tests/fleet/test_multi_host.py)."""

from __future__ import annotations

from pathlib import Path

from textual.widgets import ProgressBar

from tests.tui.driving import live_app, run_smoke_load
from tests.tui.helpers import text_of, wait_until

NODE = "load-from-node"


async def test_the_load_screen_loads_from_the_node_by_default_and_from_here_when_told(
    tmp_path: Path,
) -> None:
    async with live_app(tmp_path, NODE, "the embedded agent's first frame") as live:
        app, pilot, store = live.app, live.pilot, live.services.store
        engine = await live.client.start("sim", {"profile": "h100-llama2-7b-vllm"}, runtime="sim")
        await pilot.press("4")
        key = f"{NODE}/{engine.id}"
        await wait_until(pilot, lambda: key in app.screen.target_keys, "the engine as a target")
        await run_smoke_load(pilot, key)  # the default: from the node
        from_node = text_of(pilot, "#load-path")
        (first,) = store.list_runs()
        bar = app.screen.query_one("#load-progress", ProgressBar)
        assert bar.percentage == 1.0  # the first run, whole
        await run_smoke_load(pilot, key, "here", started=lambda: bar.percentage)
        from_here = text_of(pilot, "#load-path")
        (second,) = [r for r in store.list_runs() if r.run_id != first.run_id]
        node_runs = await live.client.loads()
    assert from_node == f"load from {NODE}, next to its engine (node-local)"
    assert first.profile["placement"] == {
        "engine_node": NODE,
        "load_node": NODE,
        "path": "node-local",
    }
    assert [r.run_id for r in node_runs] == [first.run_id]  # the agent generated it
    # The embedded agent is on this machine's loopback: from here, the engine's own URL.
    assert from_here.startswith("load from control-plane → engine on") and "(direct)" in from_here
    assert second.profile["placement"]["load_node"] == "control-plane"
    assert first.request_count == second.request_count == 8
    assert first.status == second.status == "completed"
