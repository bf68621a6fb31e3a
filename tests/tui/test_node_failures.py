"""A node whose agent dies, or answers garbage, shows an error state; the TUI keeps
running and recovers when the agent returns.  Real agent process, real sockets."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from control.config import Config, NodeConfig
from control.model import NodeStatus
from control.services import Backoff
from control.wiring import build_services
from tests.ports import free_port
from tests.tui.conftest import SIZE
from tests.tui.helpers import wait_until
from tui.app import create_app
from tui.fasttable import FastTable


class AgentProcess:
    """``infer-agent`` as an operator runs it, on a port that survives restarts."""

    def __init__(self, tmp: Path) -> None:
        self.port = free_port()
        self.token_file = tmp / "agent.token"
        self.token_file.write_text("t" * 32 + "\n")
        self.token_file.chmod(0o600)
        self.state = tmp / "agent-state"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        exe = Path(sys.executable).with_name("infer-agent")
        self.proc = subprocess.Popen(
            [
                str(exe),
                "--listen",
                f"127.0.0.1:{self.port}",
                "--token-file",
                str(self.token_file),
                "--platform",
                "replay",
                "--node-name",
                "n1",
                "--state-dir",
                str(self.state),
                "--interval",
                "250ms",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=os.environ.copy(),
        )

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.proc = None


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[AgentProcess]:
    proc = AgentProcess(tmp_path)
    proc.start()
    yield proc
    proc.stop()


async def garbage_ws(request: web.Request) -> web.WebSocketResponse:
    ws = web.WebSocketResponse()
    await ws.prepare(request)
    await ws.send_str("<html>this is not a telemetry frame")
    await ws.close()
    return ws


async def garbage_text(request: web.Request) -> web.Response:
    return web.Response(text="garbage")


async def garbage_server() -> AsyncIterator[str]:
    app = web.Application()
    app.router.add_get("/v1/telemetry/stream", garbage_ws)
    app.router.add_route("*", "/{tail:.*}", garbage_text)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


def node_row(app: Any, name: str) -> list[str]:
    """The node's row as the Fleet screen draws it."""
    table = app.screen.query_one("#nodes", FastTable)
    return [str(getattr(c, "plain", c)) for c in table.cells(name)]


async def test_dead_and_garbled_agents_show_errors_and_recover(
    agent: AgentProcess, tmp_path: Path
) -> None:
    gen = garbage_server()
    garbage_url = await gen.__anext__()
    config = Config(
        nodes=(
            NodeConfig("n1", agent.url, agent.token_file),
            NodeConfig("junk", garbage_url, agent.token_file),
        ),
        db_path=tmp_path / "runs.db",
        refresh_s=0.05,
    )
    try:
        async with build_services(config) as services:
            services.backoff = Backoff(initial_s=0.2, max_s=0.5)
            app = create_app(config, services=services)
            async with app.run_test(size=SIZE) as pilot:
                nodes = app.model.nodes
                await wait_until(
                    pilot,
                    lambda: nodes["n1"].status is NodeStatus.OK,
                    "the agent's first frame",
                    timeout_s=30,
                )
                await wait_until(
                    pilot,
                    lambda: nodes["junk"].status is NodeStatus.ERROR,
                    "the garbled node's error",
                )
                app.redraw_now()
                await pilot.pause()
                junk = node_row(app, "junk")
                assert junk[1] == "ERROR"
                assert junk[-1].startswith("garbled answer, not telemetry"), junk

                agent.stop()
                await wait_until(
                    pilot, lambda: nodes["n1"].status is NodeStatus.ERROR, "the dead agent's error"
                )
                app.redraw_now()
                await pilot.pause()
                assert node_row(app, "n1")[1] == "ERROR"
                assert nodes["n1"].error

                agent.start()
                await wait_until(
                    pilot,
                    lambda: nodes["n1"].status is NodeStatus.OK,
                    "the agent to come back",
                    timeout_s=30,
                )

                # the row reads "ok" once the node-unreachable alert has cleared too, after
                # its hold-down: a moment after the first frame on a busy machine
                def shows_ok() -> bool:
                    app.redraw_now()
                    return node_row(app, "n1")[1] == "ok"

                await wait_until(pilot, shows_ok, "the node's row back to ok")
                assert nodes["junk"].status is NodeStatus.ERROR
                assert app.is_running
    finally:
        await gen.aclose()
