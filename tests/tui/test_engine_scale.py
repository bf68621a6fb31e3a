"""``r`` on the Engines screen scales a Swarm engine: against a real embedded agent that
deployed a service (its record in the agent's state dir), the dialog lists the service
from the agent's own engine list, asks how many replicas, and sends them to that agent,
whose answer is shown.  Docker here is no Swarm manager (the agent's Docker socket is
one nobody answers on), so the agent's answer is Swarm's refusal, in its words."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.widgets import Input, Log, Select

from agents.runtime import Deployment
from agents.runtime.state import StateStore
from tests.tui.driving import live_app, wait_for_action
from tests.tui.helpers import painted, text_of, type_into, wait_until
from tui.scale_form import ScaleEngine

NODE = "swarm-manager"


async def test_scale_asks_the_replicas_and_sends_them_to_the_deploying_agent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path / 'no-docker.sock'}")
    StateStore(tmp_path / "agent").save(
        Deployment(
            id="svc1", kind="llamacpp", runtime="swarm", port=18123,
            config={"model": "/models/tiny.gguf", "port": 18123},
            options={"placement": {"label": "pool=h100"}, "replicas": 1},
        )
    )  # fmt: skip
    async with live_app(tmp_path, NODE, "the embedded agent's first frame") as live:
        app, pilot = live.app, live.pilot
        await pilot.press("3")
        await wait_until(pilot, lambda: bool(app.screen.query("#engine-table")), "Engines")
        await pilot.press("r")
        await wait_until(pilot, lambda: isinstance(app.screen, ScaleEngine), "the scale dialog")
        assert app.screen.query_one("#scale-service", Select).value == f"{NODE}/svc1"
        shown = painted(app.screen.query_one("#scale-service #label"))
        # Swarm did not answer here: how many run is unknown, not 0.
        assert shown == "llamacpp svc1 /models/tiny.gguf · ?/1 run", shown
        where = text_of(pilot, "#scale-where")
        assert f"deployed from {NODE}" in where and "node.labels.pool == h100" in where, where
        assert app.screen.query_one("#replicas", Input).value == "1"  # as asked so far
        await type_into(pilot, "#replicas", "3")
        await pilot.press("enter")
        await wait_for_action(pilot, "scale failed", "the agent's answer to the scale")
        status = text_of(pilot, "#action-status")
        assert "engine svc1 was not scaled" in status and "docker service scale" in status
        log = "\n".join(str(line) for line in app.screen.query_one("#action-log", Log).lines)
        assert "asking Swarm for 3 replica(s) of svc1" in log


async def test_scale_without_a_swarm_service_says_how_to_get_one(tmp_path: Path) -> None:
    async with live_app(tmp_path, NODE, "the embedded agent's first frame") as live:
        app, pilot = live.app, live.pilot
        await pilot.press("3")
        await wait_until(pilot, lambda: bool(app.screen.query("#engine-table")), "Engines")
        await pilot.press("r")

        def told() -> bool:
            return any("no Swarm service to scale" in str(n.message) for n in app._notifications)

        await wait_until(pilot, told, "the notice that there is nothing to scale")
        assert not isinstance(app.screen, ScaleEngine)
