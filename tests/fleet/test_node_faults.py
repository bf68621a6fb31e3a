"""Faults on one host while the control plane watches the fleet (issue 22): the TUI (Pilot)
follows nodes ``a`` and ``b`` (network namespaces, each with its own ``infer-agent``). On b
the rig's real llama-server is killed, or stalled (SIGSTOP), or b's link is cut. The fleet
shows each (b's engine crashed with the exit code b's agent saw; unhealthy and healthy
again; b in error and back); node a's rows keep updating all the while."""

from __future__ import annotations

import contextlib
import json
import os
import signal
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from agents.client import AgentClient
from agents.protocol import EngineInfo
from control.model import NodeStatus
from tests.conftest import Rig
from tests.fleet.on_screen import (
    active,
    engine_row,
    fleet_on_screen,
    keeps_updating,
    node_row,
    seq,
)
from tests.netns import TestNode, link_cut
from tests.tui.helpers import painted, wait_until

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


def _engine_pid(node: TestNode, engine: EngineInfo) -> int:
    record = node.state_dir / "deployments" / f"{engine.id}.json"
    return int(json.loads(record.read_text())["pid"])


@contextlib.contextmanager
def stalled(pid: int) -> Iterator[None]:
    """The process hung (SIGSTOP) for the block; it runs on again when the block ends,
    whatever happened inside."""
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


async def test_an_engine_killed_on_another_host_is_shown_crashed_and_the_rest_goes_on(
    fleet: dict[str, TestNode], llama_on_b: EngineInfo, tmp_path: Path
) -> None:
    b, engine = fleet["b"], llama_on_b
    async with fleet_on_screen(fleet, tmp_path) as (app, pilot):
        await wait_until(
            pilot,
            lambda: any(e.id == engine.id for _, e in app.model.engines()),
            "b's engine on screen",
        )
        os.killpg(_engine_pid(b, engine), signal.SIGKILL)

        await wait_until(pilot, lambda: bool(active(app, "engine_exited")), "engine exited")
        async with AgentClient(b.agent_url, b.token) as client:
            crashed = await client.engine(engine.id)
        (alert,) = active(app, "engine_exited")
        assert (alert.node, alert.engine_id) == ("b", engine.id)
        assert crashed.exit_code is not None and alert.value == crashed.exit_code
        assert f"exited with code {crashed.exit_code}" in alert.message

        # The Fleet screen: b's engine row says crashed, the badge counts the alert.
        await wait_until(
            pilot, lambda: "crashed" in engine_row(app, engine.id), "b's engine crashed"
        )
        assert "▲ 1 alert" in painted(app.screen.query_one("#tabs"))

        # Nothing else stops: a's frames keep coming and are drawn; b's agent is up.
        seq_a, seq_b = seq(app, "a"), seq(app, "b")
        await wait_until(
            pilot,
            lambda: seq(app, "a") >= seq_a + 3 and seq(app, "b") >= seq_b + 3,
            "three more frames from each node",
        )
        assert app.model.nodes["a"].status is NodeStatus.OK
        assert app.model.nodes["b"].status is NodeStatus.OK
        await wait_until(pilot, lambda: " ok " in node_row(app, "a"), "a's row ok")
        assert " 1 alert " in node_row(app, "b"), node_row(app, "b")


async def test_an_engine_stalled_on_another_host_is_shown_unhealthy_and_back_while_a_goes_on(
    fleet: dict[str, TestNode], llama_on_b: EngineInfo, tmp_path: Path
) -> None:
    b, engine = fleet["b"], llama_on_b
    async with fleet_on_screen(fleet, tmp_path) as (app, pilot):
        await wait_until(
            pilot, lambda: "healthy" in engine_row(app, engine.id), "b's engine healthy"
        )
        with stalled(_engine_pid(b, engine)):
            # b's agent asks the engine's health route every 5 s (2 s to answer): the row
            # says unhealthy; held 10 s, it is the health-lost alert, marking b's rows.
            await wait_until(
                pilot, lambda: "unhealthy" in engine_row(app, engine.id), "b's engine unhealthy"
            )
            await wait_until(
                pilot, lambda: bool(active(app, "health_lost")), "the health-lost alert"
            )
            (alert,) = active(app, "health_lost")
            assert (alert.node, alert.engine_id) == ("b", engine.id)
            await wait_until(
                pilot, lambda: " 1 alert " in node_row(app, "b"), "b's row marked by the alert"
            )
            assert engine_row(app, engine.id)[:1] == ["▲"]
            # Nothing else stops: a's frames keep coming and are drawn; so are b's own.
            await keeps_updating(app, pilot, "a")
            seq_b = seq(app, "b")
            await wait_until(pilot, lambda: seq(app, "b") >= seq_b + 3, "b's frames go on")
            assert "unhealthy" in engine_row(app, engine.id)
        await wait_until(
            pilot, lambda: "healthy" in engine_row(app, engine.id), "b's engine healthy again"
        )
        await wait_until(pilot, lambda: not active(app, "health_lost"), "the alert cleared")
        await wait_until(pilot, lambda: " ok " in node_row(app, "b"), "b's row ok again")
        await keeps_updating(app, pilot, "a")


async def test_a_link_cut_to_another_host_is_shown_and_b_comes_back_while_a_goes_on(
    fleet: dict[str, TestNode], tmp_path: Path
) -> None:
    async with fleet_on_screen(fleet, tmp_path) as (app, pilot):
        b = app.model.nodes["b"]
        with link_cut(fleet["b"]):
            # Nothing says "closed" on a cut link: within seconds no frame is the node-
            # unreachable alert on b's row; the stream's heartbeat (a ping after 30 s of
            # silence, 15 s for its pong) then ends the stream: b in ERROR, said why,
            # retried (refused or unanswered while the link is down).
            await wait_until(
                pilot,
                lambda: any(a.node == "b" for a in active(app, "node_unreachable")),
                "the node-unreachable alert for b",
            )
            await wait_until(
                pilot, lambda: " 1 alert " in node_row(app, "b"), "b's row marked by the alert"
            )
            await wait_until(
                pilot,
                lambda: b.status is NodeStatus.ERROR,
                "b in error once its stream's heartbeat went unanswered",
                timeout_s=120,  # 45 s of heartbeat, on a busy machine a little more
            )
            await wait_until(pilot, lambda: "ERROR" in node_row(app, "b"), "b's row ERROR")
            # why, in words, under the table (the reason changes as retries fail)
            assert b.error
            await wait_until(
                pilot,
                lambda: painted(app.screen.query_one("#node-errors")).startswith("b: "),
                "b's error under the table",
            )
            # Node a's frames keep coming and are drawn, b's do not.
            seq_b = seq(app, "b")
            await keeps_updating(app, pilot, "a")
            assert seq(app, "b") == seq_b and b.status is NodeStatus.ERROR
        # The link back: b's stream is retried (every 3 s at most) and its frames return.
        seq_b = seq(app, "b")
        await wait_until(
            pilot,
            lambda: b.status is NodeStatus.OK and seq(app, "b") >= seq_b + 3,
            "b's frames back after the link returned",
        )
        await wait_until(pilot, lambda: not active(app, "node_unreachable"), "alert cleared")
        await wait_until(pilot, lambda: " ok " in node_row(app, "b"), "b's row ok again")
        assert app.model.nodes["a"].status is NodeStatus.OK
