"""The fleet on screen: the TUI (Pilot) following the multi-host rig's nodes, and what its
Fleet screen paints for a node or an engine, read as the operator reads it."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from textual.pilot import Pilot

from control.config import load_config
from control.model import NodeStatus
from control.wiring import build_services
from tests.fleet.conftest import write_config
from tests.netns import TestNode
from tests.tui.conftest import SIZE
from tests.tui.helpers import painted, wait_until
from tui.app import create_app


@contextlib.asynccontextmanager
async def fleet_on_screen(
    fleet: dict[str, TestNode], tmp_path: Path
) -> AsyncIterator[tuple[Any, Pilot[Any]]]:
    """The TUI following the fleet, once both nodes' frames are on screen."""
    config = load_config(write_config(tmp_path / "config.toml", fleet))
    config = replace(config, db_path=tmp_path / "runs.db", refresh_s=0.1)
    async with build_services(config) as services:
        app = create_app(config, services=services)
        async with app.run_test(size=SIZE) as pilot:
            await wait_until(
                pilot,
                lambda: all(app.model.nodes[n].status is NodeStatus.OK for n in ("a", "b")),
                "both nodes on screen",
            )
            yield app, pilot


def _rows(app: Any, table: str) -> list[str]:
    return painted(app.screen.query_one(table)).splitlines()


def _row(rows: list[str], name: str) -> str:
    """The row whose first cell (after an alert's mark) is ``name``."""
    return next((r for r in rows if r.replace("▲", " ").split()[:1] == [name]), "")


def node_row(app: Any, name: str) -> str:
    """The node's row as the Fleet screen paints it now."""
    app.redraw_now()
    return _row(_rows(app, "#nodes"), name)


def engine_row(app: Any, engine_id: str) -> list[str]:
    """The engine's row as the Fleet screen paints it now, cell words apart ("healthy" is
    a word of its own, not the end of "unhealthy")."""
    app.redraw_now()
    return next((r.split() for r in _rows(app, "#engines") if engine_id in r), [])


def seq(app: Any, node: str) -> int:
    """The sequence number of the node's newest frame in the app's model (-1: none yet)."""
    frame = app.model.nodes[node].frame
    return -1 if frame is None else int(frame.seq)


def active(app: Any, rule: str) -> list[Any]:
    """The app's active alerts of ``rule``."""
    return [a for a in app.alerts.active if a.rule == rule]


async def keeps_updating(app: Any, pilot: Pilot[Any], name: str) -> None:
    """Three more of the node's frames reach the model, and its row is painted ``ok``."""
    since = seq(app, name)
    await wait_until(pilot, lambda: seq(app, name) >= since + 3, f"three more frames of {name}")
    assert app.model.nodes[name].status is NodeStatus.OK
    await wait_until(pilot, lambda: " ok " in node_row(app, name), f"{name}'s row ok")
