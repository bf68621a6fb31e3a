"""A node reached only through a real OpenSSH sshd: its agent listens on the node's own
loopback, and the control plane goes through ``ssh -L`` by a test-made ``ssh_config`` alias
(tests/netns.py's SSH nodes): telemetry, an engine started from the TUI, a load test, the
tunnel redialled after its ssh client is killed, a jump host, a changed host key refused."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from textual.widgets import Select

from control.backoff import Backoff
from control.config import Config, load_config
from control.model import NodeStatus
from control.ssh_tunnel import TunnelError, TunnelState
from control.transport import connected, opened
from control.wiring import build_services
from tests.conftest import IN_CI, Rig
from tests.netns import SshRig, TestNode, network_nodes, sshd_reason
from tests.tui.conftest import SIZE
from tests.tui.driving import run_smoke_load, wait_for_action
from tests.tui.helpers import text_of, type_into, wait_until
from tui.app import create_app

pytestmark = [pytest.mark.netns, pytest.mark.docker]  # docker: the rig's llama-server and model


@pytest.fixture(scope="module")
def ssh_fleet(rig: Rig, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, TestNode]]:
    if reason := sshd_reason():
        if IN_CI:
            pytest.fail(f"CI=true and the ssh tests cannot run: {reason}", pytrace=False)
        pytest.skip(reason)
    workdir = tmp_path_factory.mktemp("sshfleet")
    natives = {"llamacpp": rig.llama_server_bin}
    model_dirs = (rig.tiny_model.resolve().parent,)
    with network_nodes(
        ("jump", "lab"), workdir, natives=natives, model_dirs=model_dirs, ssh=("jump", "lab")
    ) as nodes:
        yield nodes


def ssh_rig(node: TestNode) -> SshRig:
    return SshRig.at(node.token_file.parent)


def node_config(path: Path, node: TestNode, alias: str, ssh_config: Path) -> Config:
    path.write_text(
        f'[[nodes]]\nname = "{node.name}"\ntransport = "ssh"\nssh = "{alias}"\n'
        f'ssh_config = "{ssh_config}"\ntoken_file = "{node.token_file}"\n'
    )
    return replace(load_config(path), db_path=path.parent / "runs.db")


async def test_through_an_alias_the_tui_watches_starts_an_engine_runs_a_load_and_redials(
    ssh_fleet: dict[str, TestNode], rig: Rig, tmp_path: Path
) -> None:
    lab = ssh_fleet["lab"]
    config = node_config(tmp_path / "config.toml", lab, "lab", ssh_rig(lab).config_file)
    async with build_services(config) as services:
        (handle,) = services.nodes
        assert handle.tunnel is not None and handle.url.startswith("http://127.0.0.1:")
        states: list[TunnelState] = []
        up_at: list[float] = []  # when the tunnel came up, each time

        def seen(state: TunnelState) -> None:
            states.append(state)
            if state.phase == "up":
                up_at.append(time.monotonic())

        handle.tunnel.subscribe(seen)
        app = create_app(config, services=services)
        async with app.run_test(size=SIZE) as pilot:
            node = app.model.nodes["lab"]
            await wait_until(pilot, lambda: node.status is NodeStatus.OK, "lab's telemetry")
            assert node.link == "ssh lab: up"

            # an engine started from the Engines screen, through the tunnel
            await pilot.press("3")
            screen = app.screen
            screen.query_one("#kind", Select).value = "llamacpp"
            screen.query_one("#runtime", Select).value = "process"
            await type_into(pilot, "#model", rig.tiny_model.resolve().name)
            await type_into(pilot, "#context", "512")
            await pilot.click("#start")
            await wait_for_action(pilot, "healthy", "llama-server on lab", timeout_s=120)
            assert handle.client is not None
            (engine,) = await handle.client.engines()

            # a load test from here, through the tunnel and the agent's proxy
            await pilot.press("4")
            key = f"lab/{engine.id}"
            await wait_until(pilot, lambda: key in app.screen.target_keys, "lab's engine")
            await run_smoke_load(pilot, key, "here")
            assert "through its agent's proxy" in text_of(pilot, "#load-path")

            # the ssh client dies: the tunnel redials at once and the frames come back
            # within 5 s of it being up again. From the kill, a busy 2-core box adds ssh's
            # own key exchange and login (seconds there), which is not what this is about.
            await pilot.press("1")
            pid, seq = handle.tunnel.pid, node.frame.seq if node.frame else -1
            assert pid is not None
            ups = len(up_at)
            os.kill(pid, signal.SIGKILL)
            await wait_until(
                pilot,
                lambda: node.frame is not None and node.frame.seq > seq and node.link_up,
                "lab's frames again",
                timeout_s=60,
            )
            back_at = time.monotonic()
            assert handle.tunnel.pid not in (None, pid)
            phases = [s.phase for s in states]
            assert phases[-3:] == ["retrying", "connecting", "up"], phases
            assert states[-3].retry_in_s == Backoff().initial_s  # the first, shortest delay
            assert len(up_at) == ups + 1 and back_at - up_at[-1] < 5
            await handle.client.stop(engine.id)
        (run,) = services.store.list_runs() if services.store else ()
    assert run.status == "completed" and run.profile["placement"]["path"] == "proxied"


async def test_a_jump_host_carries_the_tunnel(
    ssh_fleet: dict[str, TestNode], tmp_path: Path
) -> None:
    jump, lab = ssh_fleet["jump"], ssh_fleet["lab"]
    rig = ssh_rig(lab)
    ssh_config = tmp_path / "ssh_config"
    ssh_config.write_text(
        rig.config_file.read_text() + rig.host_block("lab-via-jump", lab, "ProxyJump jump")
    )
    config = node_config(tmp_path / "config.toml", lab, "lab-via-jump", ssh_config)
    async with connected(config.nodes[0]) as client:
        assert (await client.node_info()).node == "lab"
    # lab's sshd saw the login come from the jump host, not from this machine
    assert f"from {jump.address}" in rig.sshd_log(lab).read_text()


async def test_a_changed_host_key_is_refused_in_openssh_words(
    ssh_fleet: dict[str, TestNode], tmp_path: Path
) -> None:
    lab = ssh_fleet["lab"]
    rig = ssh_rig(lab)
    stranger = tmp_path / "stranger"
    keygen = ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(stranger)]
    await asyncio.to_thread(subprocess.run, keygen, check=True)
    key = stranger.with_suffix(".pub").read_text().split()
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text(f"[{lab.address}]:2222 {key[0]} {key[1]}\n")
    ssh_config = tmp_path / "ssh_config"
    ssh_config.write_text(rig.host_block("lab", lab, f"UserKnownHostsFile {known_hosts}"))
    config = node_config(tmp_path / "config.toml", lab, "lab", ssh_config)
    with pytest.raises(TunnelError) as refused:
        async with opened(config.nodes[0]):
            pytest.fail("the tunnel came up with a host key that changed")
    message = str(refused.value)
    assert "ssh lab: failed" in message and "host key of lab has CHANGED" in message
    assert "Host key verification failed." in message and str(known_hosts) in message

    # the TUI says the same on the node's row, and no retry hides it
    async with build_services(config) as services:
        app = create_app(config, services=services)
        async with app.run_test(size=SIZE) as pilot:
            await wait_until(
                pilot, lambda: "has CHANGED" in (app.model.nodes["lab"].link or ""), "the refusal"
            )
            app.redraw_now()
            await pilot.pause()
            assert "host key of lab has CHANGED" in text_of(pilot, "#node-errors")
