"""A fault on one host while the control plane watches the fleet (issue 22): the TUI (Pilot)
follows nodes ``a`` and ``b`` (network namespaces, each with its own ``infer-agent``), and
the rig's real llama-server on ``b`` is killed. The fleet shows b's engine crashed with the
exit code b's agent saw; node a's rows keep updating and b's agent stays connected."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from agents.client import AgentClient
from agents.protocol import EngineInfo
from control.config import load_config
from control.model import NodeStatus
from control.wiring import build_services
from tests.conftest import Rig
from tests.fleet.conftest import write_config
from tests.netns import TestNode
from tests.tui.conftest import SIZE
from tests.tui.helpers import painted, wait_until
from tui.app import create_app

pytestmark = [pytest.mark.netns, pytest.mark.docker]  # docker: the rig's llama-server and model


@pytest.fixture
async def llama_on_b(fleet: dict[str, TestNode], rig: Rig) -> AsyncIterator[EngineInfo]:
    """llama.cpp (process runtime) on node b, started through b's agent; stopped (its
    record removed) after the test whatever became of it."""
    b = fleet["b"]
    launch = {"model": rig.tiny_model.resolve().name, "max_num_seqs": 1, "context_len": 256}
    async with AgentClient(b.agent_url, b.token) as client:
        engine = await client.start("llamacpp", launch, runtime="process")
        try:
            assert engine.health == "healthy", engine.message
            yield engine
        finally:
            await client.stop(engine.id)


def _rows(app: Any, table: str) -> list[str]:
    return painted(app.screen.query_one(table)).splitlines()


def _row(rows: list[str], name: str) -> str:
    """The row whose first cell (after an alert's mark) is ``name``."""
    return next((r for r in rows if r.replace("▲", " ").split()[:1] == [name]), "")


def _seq(app: Any, node: str) -> int:
    frame = app.model.nodes[node].frame
    return -1 if frame is None else int(frame.seq)


async def test_an_engine_killed_on_another_host_is_shown_crashed_and_the_rest_goes_on(
    fleet: dict[str, TestNode], llama_on_b: EngineInfo, tmp_path: Path
) -> None:
    b, engine = fleet["b"], llama_on_b
    config = load_config(write_config(tmp_path / "config.toml", fleet))
    config = replace(config, db_path=tmp_path / "runs.db", refresh_s=0.1)
    async with build_services(config) as services:
        app = create_app(config, services=services)
        async with app.run_test(size=SIZE) as pilot:
            await wait_until(
                pilot,
                lambda: (
                    all(app.model.nodes[n].status is NodeStatus.OK for n in ("a", "b"))
                    and any(e.id == engine.id for _, e in app.model.engines())
                ),
                "both nodes and b's engine on screen",
            )
            record = b.state_dir / "deployments" / f"{engine.id}.json"
            os.killpg(json.loads(record.read_text())["pid"], signal.SIGKILL)

            def exited() -> list[Any]:
                return [a for a in app.alerts.active if a.rule == "engine_exited"]

            await wait_until(pilot, lambda: bool(exited()), "engine exited on screen")
            async with AgentClient(b.agent_url, b.token) as client:
                crashed = await client.engine(engine.id)
            (alert,) = exited()
            assert (alert.node, alert.engine_id) == ("b", engine.id)
            assert crashed.exit_code is not None and alert.value == crashed.exit_code
            assert f"exited with code {crashed.exit_code}" in alert.message

            # The Fleet screen: b's engine row says crashed, the badge counts the alert.
            def engine_row() -> str:
                app.redraw_now()
                rows = painted(app.screen.query_one("#engines")).splitlines()
                return next((r for r in rows if engine.id in r), "")

            await wait_until(pilot, lambda: "crashed" in engine_row(), "b's engine crashed")
            assert "▲ 1 alert" in painted(app.screen.query_one("#tabs"))

            # Nothing else stops: a's frames keep coming and are drawn; b's agent is up.
            seq_a, seq_b = _seq(app, "a"), _seq(app, "b")
            await wait_until(
                pilot,
                lambda: _seq(app, "a") >= seq_a + 3 and _seq(app, "b") >= seq_b + 3,
                "three more frames from each node",
            )
            assert app.model.nodes["a"].status is NodeStatus.OK
            assert app.model.nodes["b"].status is NodeStatus.OK
            app.redraw_now()
            await pilot.pause()
            nodes = _rows(app, "#nodes")
            assert " ok " in _row(nodes, "a") and " 1 alert " in _row(nodes, "b"), nodes
