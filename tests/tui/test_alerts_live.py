"""Alerts from real parts: an ``infer-agent`` process on 127.0.0.1 running the rig's
real llama-server natively.  Killing the engine raises "engine exited" with the exit
code the agent saw, a swap starting it again clears it; stopping the agent raises
"node unreachable" within the stale window, starting it again clears it.  Each is
asserted on the screen (Pilot) and in the store."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from agents.client import AgentClient
from alerts import parse_alert_config
from control.config import Config
from control.nodes import NodeHandle
from control.services import Services
from store import open_store
from tests.ports import free_port
from tests.tui.conftest import SIZE
from tests.tui.helpers import painted, wait_until
from tests.waiting import apoll_until
from tui.app import create_app

TOKEN = "alerts-live-token-0123456789"
ROOT = Path(__file__).resolve().parents[2]


class AgentProcess:
    """``infer-agent`` on a fixed loopback port, so it can be stopped and started again."""

    def __init__(self, tmp: Path, rig: Any) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.tmp = tmp
        self.rig = rig
        (tmp / "tok").write_text(TOKEN)
        (tmp / "tok").chmod(0o600)  # the agent refuses a token file others can read
        self.proc: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "agents.cli",
            "--listen",
            f"127.0.0.1:{self.port}",
            "--token-file",
            str(self.tmp / "tok"),
            "--replay-trace",
            "--platform",
            "replay",
            "--native",
            f"llamacpp={self.rig.llama_server_bin}",
            "--model-dir",
            str(self.rig.tiny_model.parent),
            "--allow-engine",
            "llamacpp",
            "--interval",
            "500ms",
            "--state-dir",
            str(self.tmp / "state"),
            "--node-name",
            "live-0",
            cwd=ROOT,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
        )

    async def stop(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.terminate()
            await asyncio.wait_for(self.proc.wait(), 30)


@pytest.fixture
async def agent(tmp_path: Path, rig: Any) -> AsyncIterator[AgentProcess]:
    agent = AgentProcess(tmp_path, rig)
    await agent.start()
    try:
        yield agent
    finally:
        await agent.stop()
        for record in (tmp_path / "state" / "deployments").glob("*.json"):
            pid = json.loads(record.read_text()).get("pid")
            if pid:  # the engine runs in its own session: it outlives the agent
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pid, signal.SIGKILL)


@pytest.mark.docker  # the rig (llama-server binary, tiny model)
async def test_killed_llama_server_raises_engine_exited_and_a_restart_clears_it(
    agent: AgentProcess, rig: Any, tmp_path: Path
) -> None:
    store = open_store(tmp_path / "alerts.db")
    client = AgentClient(agent.url, TOKEN)
    services = Services(nodes=(NodeHandle("live-0", agent.url, client, token=TOKEN),), store=store)
    app = create_app(Config(refresh_s=0.05), services=services)
    launch = {"model": str(rig.tiny_model), "max_num_seqs": 1, "context_len": 128}
    try:
        await apoll_until(client.node_info, "the agent", ignoring=(Exception,), timeout_s=60)
        engine = await client.start("llamacpp", launch, runtime="process")
        assert engine.health == "healthy", engine.message
        async with app.run_test(size=SIZE) as pilot:
            await wait_until(pilot, lambda: app.model.engines(), "the engine on screen")
            record = tmp_path / "state" / "deployments" / f"{engine.id}.json"
            os.killpg(json.loads(record.read_text())["pid"], signal.SIGKILL)
            await wait_until(
                pilot,
                lambda: [a for a in app.alerts.active if a.rule == "engine_exited"],
                "engine exited",
            )
            crashed = await client.engine(engine.id)
            (alert,) = app.alerts.active
            assert (alert.title, alert.engine_id) == ("engine exited", engine.id)
            assert crashed.exit_code is not None and alert.value == crashed.exit_code
            assert f"exited with code {crashed.exit_code}" in alert.message
            app.redraw_now()
            await pilot.pause()
            assert "▲ 1 alert" in painted(app.screen.query_one("#tabs"))
            assert "▲ live-0" in painted(app.screen.query_one("#engines"))
            again = await client.swap(engine.id, launch)  # the same engine, started again
            assert again.health == "healthy", again.message
            await wait_until(pilot, lambda: not app.alerts.active, "the alert to clear")
        store.flush()
        (saved,) = store.list_alerts()
        assert (saved.rule, saved.value) == ("engine_exited", crashed.exit_code)
        assert saved.cleared_at is not None
    finally:
        with contextlib.suppress(Exception):
            await client.stop(engine.id)
        await client.close()
        store.close()


@pytest.mark.docker
async def test_a_stopped_agent_raises_node_unreachable_and_its_restart_clears_it(
    agent: AgentProcess, tmp_path: Path
) -> None:
    store = open_store(tmp_path / "alerts.db")
    client = AgentClient(agent.url, TOKEN)
    services = Services(nodes=(NodeHandle("live-0", agent.url, client, token=TOKEN),), store=store)
    stale_s = 3.0
    config = Config(
        refresh_s=0.05,
        alerts=parse_alert_config({"rules": {"node_unreachable": {"threshold": stale_s}}}),
    )
    app = create_app(config, services=services)
    try:
        await apoll_until(client.node_info, "the agent", ignoring=(Exception,), timeout_s=60)
        async with app.run_test(size=SIZE) as pilot:
            await wait_until(pilot, lambda: app.model.nodes["live-0"].frame, "a frame")
            await agent.stop()
            stopped = time.time()
            await wait_until(pilot, lambda: app.alerts.active, "node unreachable")
            (alert,) = app.alerts.active
            # within the stale window and the once-a-second check (bounds, not speed)
            assert alert.title == "node unreachable" and alert.raised_at - stopped < stale_s + 5
            app.redraw_now()
            await pilot.pause()
            nodes = painted(app.screen.query_one("#nodes"))
            assert "▲ live-0" in nodes, nodes
            await agent.start()
            await wait_until(pilot, lambda: not app.alerts.active, "the alert to clear")
        store.flush()
        (saved,) = store.list_alerts()
        assert saved.rule == "node_unreachable" and saved.cleared_at is not None
    finally:
        await client.close()
        store.close()
