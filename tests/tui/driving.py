"""Driving the app against a real embedded agent: the steps the live tests share."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from textual.pilot import Pilot
from textual.widgets import DataTable, Select, Static

from agents.embedded import embedded_config
from control.config import Config
from control.model import NodeStatus
from control.wiring import build_services
from tests.tui.conftest import SIZE
from tests.tui.helpers import text_of, type_into, wait_until
from tui.app import create_app


@dataclass(frozen=True, slots=True)
class Live:
    app: Any
    pilot: Pilot[Any]
    services: Any
    client: Any  # the agent's client, to check what the agent itself holds


@asynccontextmanager
async def live_app(
    tmp_path: Path, node: str, what: str, *, config: Config | None = None, **agent_options: Any
) -> AsyncIterator[Live]:
    """The app over one embedded agent (replayed GPUs), once the agent's first frame is in
    (``config``: the operator's, e.g. with load profiles; its store goes under tmp_path)."""
    config = replace(config or Config(), db_path=tmp_path / "runs.db")
    agent = embedded_config(
        platform="replay",
        node_name=node,
        state_dir=tmp_path / "agent",
        adopt_on_start=False,
        **agent_options,
    )
    async with build_services(config, agent_config=agent) as services:
        app = create_app(config, services=services)
        client: Any = services.nodes[0].client
        async with app.run_test(size=SIZE) as pilot:
            await wait_until(pilot, lambda: app.model.nodes[node].status is NodeStatus.OK, what)
            yield Live(app, pilot, services, client)


async def wait_for_action(pilot: Pilot[Any], text: str, what: str, timeout_s: float = 60.0) -> None:
    """Wait until the Engines screen's action status says ``text``; a question the action
    asked (a modal screen) may still be on top for a moment after its answer was clicked
    (CI's busy box saw it), and that is "not yet", not a missing status line."""

    def says() -> bool:
        status = pilot.app.screen.query("#action-status")
        return bool(status) and text in str(status.first(Static).render())

    await wait_until(pilot, says, what, timeout_s)


async def run_smoke_load(
    pilot: Pilot[Any],
    key: str,
    load_from: str | None = None,
    started: Callable[[], object] | None = None,
) -> None:
    """On the Load screen: the smoke profile against target ``key`` (generated where
    ``load_from`` says: "node" or "here"; else the screen's default), until it is saved.
    ``started``: a reading asserted falsy the moment the run starts (before any event)."""
    screen: Any = pilot.app.screen
    screen.query_one("#target", Select).value = key
    screen.query_one("#profile", Select).value = "smoke"
    if load_from is not None:
        screen.query_one("#load-from", Select).value = load_from
    await pilot.pause()
    if started is not None:
        screen.action_run()  # the press itself, read before the run can report anything
        assert not started(), started()
    else:
        await pilot.click("#run")
    await wait_until(
        pilot,
        lambda: "finished and saved" in text_of(pilot, "#load-status"),
        "the load test to finish",
        timeout_s=120,
    )


async def swap_engine(pilot: Pilot[Any], field: str, value: str, timeout_s: float) -> None:
    """On the Engines screen: change one form field and swap the node's one engine."""
    table = pilot.app.screen.query_one("#engine-table", DataTable)
    await wait_until(pilot, lambda: table.row_count == 1, "the engine in the node's table")
    await type_into(pilot, field, value)
    await pilot.click("#swap")
    await confirm(pilot, "Swap ")
    await wait_for_action(pilot, "swap done", "the swap", timeout_s)


async def stop_first_engine(pilot: Pilot[Any], frame_shows: Callable[[], bool], what: str) -> None:
    """On the Engines screen: once a frame shows the engine, stop the table's first row."""
    await wait_until(pilot, frame_shows, what)
    app: Any = pilot.app
    app.redraw_now()
    await pilot.pause()
    app.screen.query_one("#engine-table", DataTable).move_cursor(row=0)
    await pilot.click("#stop")
    await confirm(pilot, "Stop ")
    await wait_for_action(pilot, "stop done", "the stop")


async def confirm(pilot: Pilot[Any], question: str) -> None:
    """Answer yes to the confirmation an action asks, which names the node's engine."""
    await wait_until(pilot, lambda: bool(pilot.app.screen.query("#yes")), "the confirmation")
    asked = str(pilot.app.screen.query_one("Label").render())
    assert asked.startswith(question) and " on " in asked, asked
    await pilot.click("#yes")
