"""An agent SIGKILLed and restarted while the TUI watches (issue 22, docs/reliability.md):
the Fleet screen says the node is down and when it will retry, and however long the outage
lasted (the retry delay at its cap), the TUI is back on the restarted agent's telemetry within
5 s of it listening again. Real agent process, the TUI's default retry policy."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

from control.config import Config, NodeConfig
from control.model import NodeStatus
from control.wiring import build_services
from tests.tui.conftest import SIZE
from tests.tui.helpers import wait_until
from tests.tui.test_node_failures import AgentProcess, node_row
from tests.waiting import apoll_until
from tui.app import create_app

RECONNECT_S = 5.0


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[AgentProcess]:
    proc = AgentProcess(tmp_path)
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


async def _listening(url: str) -> None:
    async with aiohttp.ClientSession() as http:

        async def up() -> bool:
            async with http.get(url + "/healthz") as resp:
                return resp.status == 200

        await apoll_until(up, "the agent to listen again", ignoring=(aiohttp.ClientError,))


async def test_a_killed_agent_is_shown_down_and_its_restart_is_back_within_5_s(
    agent: AgentProcess, tmp_path: Path
) -> None:
    config = Config(
        nodes=(NodeConfig("n1", agent.url, agent.token_file),),
        db_path=tmp_path / "runs.db",
        refresh_s=0.05,
    )
    async with build_services(config) as services:
        cap_s = services.backoff.max_s  # the default policy, not a test's faster one
        app = create_app(config, services=services)
        async with app.run_test(size=SIZE) as pilot:
            node = app.model.nodes["n1"]
            await wait_until(pilot, lambda: node.status is NodeStatus.OK, "the first frame", 30)
            assert agent.proc is not None
            agent.proc.send_signal(signal.SIGKILL)
            agent.proc.wait(10)
            # The outage lasts until the retry delay is at its cap: the worst case.
            await wait_until(
                pilot, lambda: node.retry_in_s == cap_s, "the retry delay at its cap", 60
            )
            app.redraw_now()
            await pilot.pause()
            row = node_row(app, "n1")
            assert row[1] == "ERROR" and node.error, row
            assert f"retry in {cap_s:.0f}s" in row[-1], row
            agent.start()
            await _listening(agent.url)
            listening_at = time.monotonic()
            await wait_until(
                pilot, lambda: node.status is NodeStatus.OK, "the restarted agent's frames", 60
            )
            back_after_s = time.monotonic() - listening_at
            app.redraw_now()
            await pilot.pause()
            assert node_row(app, "n1")[1] != "ERROR"  # "ok", or the outage's alert clearing
            assert app.is_running
    assert back_after_s <= RECONNECT_S, back_after_s
