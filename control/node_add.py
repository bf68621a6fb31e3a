"""``node add``'s whole flow, for the CLI (``control.node_cli``) and the TUI's form alike:
check the node, build and gather the wheels, install over ssh, wait until the agent
answers through an ssh forward, add the node to the operator's config. Each step's
progress goes to ``say`` (a line at a time); a failure is a NodeSetupError (or ssh's
TunnelError, or the config's ConfigError) in words, and the config is written last.
"""

from __future__ import annotations

import asyncio
import tempfile
from dataclasses import dataclass
from pathlib import Path

from agents.client import AgentError
from agents.protocol import NodeInfo
from control.config import NodeConfig, parse_config
from control.config_edit import put_node, read_text, ssh_node_entry
from control.node_remote import write_private
from control.node_setup import (
    NAME,
    NodeSetupError,
    Remote,
    Say,
    build_wheel,
    check_node,
    default_wheel_cache,
    dependency_wheels,
    source_root,
    wheel_archive,
    wheel_digest,
)
from control.transport import opened

ANSWER_TIMEOUT_S = 60.0
POLL_S = 0.25
DEFAULT_PORT = 7070


@dataclass(frozen=True, slots=True)
class NodeAddRequest:
    name: str
    destination: str
    """user@host or an ssh alias."""
    config_file: Path
    """The operator's config file the node is added to."""
    ssh_config: Path | None = None
    port: int = DEFAULT_PORT
    """The agent's port on the node's loopback."""
    prefix: str | None = None
    """Where on the node the agent goes; None: where the config says it is, else the
    node's default."""
    rotate_token: bool = False
    agent_args: tuple[str, ...] = ()
    wheel_cache: Path | None = None


def configured(config_file: Path, name: str) -> NodeConfig | None:
    """The config file's node of that name, if any."""
    text = read_text(config_file)
    nodes = parse_config(text, source=config_file).nodes if text else ()
    return next((n for n in nodes if n.name == name), None)


def add_node(request: NodeAddRequest, say: Say) -> NodeConfig:
    """Install (or upgrade) the agent on the node and add it to the config: the node's
    config entry as written."""
    name, destination, config_file = request.name, request.destination, request.config_file
    if not NAME.fullmatch(name):
        raise NodeSetupError(f"node name {name!r}: use letters, digits, '.', '_' or '-'")
    existing = configured(config_file, name)
    if existing is not None and (existing.transport, existing.ssh) != ("ssh", destination):
        raise NodeSetupError(
            f"{config_file} already has a node {name!r} reached at {existing.ssh or existing.url}: "
            f"pick another name, or remove that entry first"
        )
    ssh_config = request.ssh_config.resolve() if request.ssh_config else None
    # an upgrade goes where the agent is: a second copy under the default would fight it
    prefix = request.prefix or (existing.prefix if existing is not None else None)
    remote = Remote(destination, ssh_config)
    say(f"[1/6] checking {destination}")
    probe = remote.call("probe", {"port": request.port, "prefix": prefix}, say)
    check_node(probe, say)
    with tempfile.TemporaryDirectory(prefix="infer-top-node-") as scratch:
        say(f"[2/6] building the agent's wheel from {source_root()}")
        wheel = build_wheel(Path(scratch))
        say("[3/6] gathering its dependencies' wheels")
        cache = request.wheel_cache or default_wheel_cache()
        deps = dependency_wheels(wheel, probe, cache, say)
        say(f"[4/6] installing the agent on {destination}")
        params = {
            "name": name,
            "port": request.port,
            "prefix": prefix,
            "rotate_token": request.rotate_token,
            "agent_args": list(request.agent_args),
            "wheel": wheel.name,
            "digest": wheel_digest(wheel),
        }
        with tempfile.TemporaryFile() as archive:
            wheel_archive([wheel, *deps], archive)
            installed = remote.call("install", params, say, stdin=archive)
    node = NodeConfig(
        name=name,
        url=f"http://127.0.0.1:{request.port}",
        token_file=config_file.parent.resolve() / f"{name}.token",
        transport="ssh",
        ssh=destination,
        ssh_config=ssh_config,
        prefix=str(installed["prefix"]),  # as the node resolved it: remove finds it there
    )
    token = str(installed["token"])
    say(f"[5/6] waiting for the agent to answer through ssh {destination}")
    info = asyncio.run(wait_answering(node, token, str(node.prefix)))
    say(f"  agent {info.agent_version} on {info.host} answers ({info.platform})")
    say(f"[6/6] adding node {name} to {config_file}")
    assert node.token_file is not None
    node.token_file.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    write_private(node.token_file, token + "\n")
    put_node(config_file, ssh_node_entry(node), name)
    state = "installed or upgraded" if installed["changed"] else "already up to date"
    say(f"node {name}: agent {state} under {installed['prefix']} on {destination}")
    return node


async def wait_answering(node: NodeConfig, token: str, prefix: str) -> NodeInfo:
    """The agent's node info through an ssh forward, asked until it answers or the deadline."""
    async with opened(node) as link, link.client(token) as client:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + ANSWER_TIMEOUT_S
        while True:
            try:
                return await client.node_info()
            except AgentError as exc:
                if exc.status:
                    raise NodeSetupError(f"the agent on {node.ssh} refused: {exc}") from exc
                if loop.time() > deadline:
                    raise NodeSetupError(
                        f"the agent on {node.ssh} did not answer in {ANSWER_TIMEOUT_S:g} s "
                        f"({exc}); see {prefix}/agent.log on the node "
                        f"(journalctl -u infer-agent where it runs under systemd)"
                    ) from exc
            await asyncio.sleep(POLL_S)
