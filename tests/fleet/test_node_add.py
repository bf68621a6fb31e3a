"""``infer-top node add/remove`` against a real sshd node (tests/netns.py): the agent is
installed from this checkout's freshly built wheel with the node-side pip on ``--no-index``
(the namespace has only its bridge, no route anywhere), answers through the ssh transport,
lands in the operator's config; a second add changes nothing; its supervisor starts it again
when it is killed; remove (told no prefix: the config recorded add's) leaves no process, no
file under the prefix and no config entry.
The node shares this machine's filesystem, so everything goes under a test-made ``--prefix``."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agents.client import AgentError
from agents.protocol import NodeInfo
from control.config import NodeConfig, load_config
from control.transport import connected
from tests.conftest import IN_CI
from tests.netns import SshRig, TestNode, network_nodes, sshd_reason
from tests.waiting import apoll_until, poll_until
from tui.cli import main

pytestmark = pytest.mark.netns

WHEEL_CACHE = Path.home() / ".cache" / "infer-top-rig" / "node-wheels"
"""The dependencies' wheels, kept between runs like the rest of the rig."""
PORT = 7071  # the rig's own agent has 7070 on the node's loopback
OTHER = '# my lab\n[[nodes]]\nname = "other"\nurl = "http://127.0.0.1:9"  # kept\n'


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestNode]:
    if reason := sshd_reason():
        if IN_CI:
            pytest.fail(f"CI=true and the ssh tests cannot run: {reason}", pytrace=False)
        pytest.skip(reason)
    workdir = tmp_path_factory.mktemp("nodeadd")
    with network_nodes(("lab",), workdir, natives={}, ssh=("lab",)) as nodes:
        yield nodes["lab"]


def _alive(pid: int) -> bool:
    """Running: an exited process not reaped yet (state Z) does not count."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def _processes_under(node: TestNode, prefix: Path) -> list[int]:
    """Pids in the node whose command line names the prefix (the supervisor, the agent)."""
    pids = node.run("ip", "netns", "pids", node.namespace).stdout.split()
    found = []
    for pid in pids:
        with contextlib.suppress(OSError):
            if str(prefix).encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(int(pid))
    return found


def _node(config: Path, name: str) -> NodeConfig | None:
    return next((n for n in load_config(config).nodes if n.name == name), None)


async def _ask_until(node: NodeConfig, deadline: float) -> NodeInfo:
    """The agent's answer once it is up again (it was just restarted)."""
    return await apoll_until(
        lambda: _ask(node),
        f"node {node.name}'s restarted agent to answer",
        timeout_s=max(1.0, deadline - time.monotonic()),
        ignoring=(AgentError,),
    )


async def _ask(node: NodeConfig) -> NodeInfo:
    async with connected(node) as client:
        return await client.node_info()


def test_node_add_installs_over_ssh_a_second_add_is_a_no_op_and_remove_cleans_up(
    lab: TestNode, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rig = SshRig.at(lab.token_file.parent)
    prefix, config = tmp_path / "node-prefix", tmp_path / "operator" / "config.toml"
    config.parent.mkdir()
    config.write_text(OTHER)
    add = ["node", "add", "lab2", "--ssh", "lab", "--ssh-config", str(rig.config_file)]
    add += ["--port", str(PORT), "--prefix", str(prefix), "--config", str(config)]
    add += ["--wheel-cache", str(WHEEL_CACHE), "--agent-arg=--interval=500ms"]
    assert "default" not in lab.run("ip", "route").stdout  # no index is reachable from it

    assert main(add) == 0, capsys.readouterr().err
    first = capsys.readouterr().out
    assert "installing the agent and its dependencies (pip --no-index)" in first
    node = _node(config, "lab2")
    assert node is not None and (node.transport, node.ssh) == ("ssh", "lab")
    assert node.url == f"http://127.0.0.1:{PORT}" and node.prefix == str(prefix)
    info = asyncio.run(_ask(node))  # through the ssh transport, with its token
    assert (info.node, info.interval_s) == ("lab2", 0.5)  # its name and --agent-arg
    token = node.read_token()  # refuses a token file others may read
    assert (prefix / "token").read_text().strip() == token
    assert (prefix / "token").stat().st_mode & 0o077 == 0
    assert (prefix / "agent.json").stat().st_mode & 0o077 == 0
    pid = int((prefix / "agent.pid").read_text())
    running = _processes_under(lab, prefix)
    assert pid in running and len(running) == 2, running  # the supervisor and the agent
    assert config.read_text().startswith(OTHER)  # the operator's own lines kept

    upgrade = [a for a in add if a not in ("--prefix", str(prefix))]  # the recorded one
    assert main(upgrade) == 0, capsys.readouterr().err
    second = capsys.readouterr().out
    assert "the agent package is up to date" in second
    assert "the agent is running unchanged" in second
    assert _processes_under(lab, prefix) == running
    again = _node(config, "lab2")
    assert again is not None and again.read_token() == token
    assert config.read_text().count('name = "lab2"') == 1

    # the supervisor starts a killed agent again, and it answers through ssh
    (agent,) = set(running) - {pid}
    os.kill(agent, signal.SIGKILL)
    deadline = time.monotonic() + 30
    poll_until(
        lambda: set(_processes_under(lab, prefix)) - {pid, agent},
        "the supervisor to start the agent again",
        timeout_s=30,
    )
    info = asyncio.run(_ask_until(node, deadline))
    assert info.node == "lab2"
    running = _processes_under(lab, prefix)

    remove = ["node", "remove", "lab2", "--config", str(config)]  # the recorded prefix
    assert main(remove) == 0, capsys.readouterr().err
    assert "model caches and Docker volumes" in capsys.readouterr().out
    assert not any(_alive(p) for p in running), running
    assert not prefix.exists()
    assert _node(config, "lab2") is None and _node(config, "other") is not None
    assert not node.token_file or not node.token_file.exists()


def test_a_refused_key_stops_node_add_with_ssh_s_words_and_nothing_written(
    lab: TestNode, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rig = SshRig.at(lab.token_file.parent)
    stranger = tmp_path / "stranger_key"
    keygen = ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(stranger)]
    subprocess.run(keygen, check=True, timeout=30)
    ssh_config = tmp_path / "ssh_config"
    ssh_config.write_text(rig.host_block("lab", lab).replace(str(rig.client_key), str(stranger)))
    config, prefix = tmp_path / "config.toml", tmp_path / "node-prefix"
    add = ["node", "add", "lab2", "--ssh", "lab", "--ssh-config", str(ssh_config)]
    add += ["--prefix", str(prefix), "--config", str(config)]
    assert main(add) == 1
    err = capsys.readouterr().err
    assert "infer-top node add: ssh lab failed:" in err and "Permission denied" in err, err
    assert "the key is refused" in err
    assert not config.exists() and not prefix.exists()

    # the rig's own agent has 7070 on the node's loopback: refused before anything is built
    add = [*add[:6], str(rig.config_file), *add[7:]]
    assert main(add) == 1
    assert "port on the node's loopback is taken by another program: pick another with --port" in (
        capsys.readouterr().err
    )
    assert not config.exists() and not prefix.exists()
