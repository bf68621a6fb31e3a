"""``infer-top node add NAME --ssh DEST`` and ``infer-top node remove NAME``.

``add`` checks the node, builds this checkout's wheel, gathers its dependencies' wheels,
installs the agent on the node over ssh (``control.node_setup``, ``control.node_remote``),
waits until it answers through an ssh forward, then adds the node to the operator's
config (``control.config_edit``) with its token. Running it again upgrades in place and
keeps the token unless ``--rotate-token``. ``remove`` undoes it on the node and in the config.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from agents.client import AgentError
from agents.protocol import NodeInfo
from control.config import ConfigError, NodeConfig, config_path, parse_config
from control.config_edit import drop_node, put_node, read_text, ssh_node_entry
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
from control.ssh_tunnel import TunnelError
from control.transport import opened

ANSWER_TIMEOUT_S = 60.0
POLL_S = 0.25
PREFIX_HELP = (
    "where on the node the agent lives (default: the one your config records for the node, "
    "else /opt/infer-agent as root, else ~/.local/share/infer-agent)"
)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "node",
        help="put an agent on a lab node over ssh (node add), or take it off (node remove)",
        description="Install, upgrade or remove the infer-top agent on a machine you reach "
        "with ssh (BatchMode: keys or an ssh agent, a ~/.ssh/config alias, ProxyJump).",
    )
    actions = p.add_subparsers(dest="node_command", metavar="ACTION", required=True)
    add = actions.add_parser(
        "add",
        help="install (or upgrade) the agent on a node over ssh and add it to your config",
        description="Checks the node (Python >= 3.11 with venv is required; Docker, Compose, "
        "NVML or Jetson are reported), builds this checkout's wheel, copies it and its "
        "dependencies' wheels over (the node needs no package index), installs them in a venv "
        "on the node, writes the agent's config and an owner-only token, starts the agent on "
        "the node's 127.0.0.1 (a systemd unit as root where systemd runs, else a supervised "
        "process with a pid file and log), waits until it answers through ssh, and adds the "
        "node to your config with transport ssh. Running it again upgrades in place and keeps "
        "the token.",
    )
    add.add_argument("name", help="the node's name in infer-top")
    add.add_argument("--ssh", required=True, metavar="DEST", help="user@host or an ssh alias")
    add.add_argument("--ssh-config", type=Path, metavar="FILE", help="ssh -F FILE for this node")
    add.add_argument(
        "--port", type=int, default=7070, help="the agent's port on the node's loopback (7070)"
    )
    add.add_argument("--prefix", metavar="NODE_DIR", help=PREFIX_HELP)
    add.add_argument(
        "--rotate-token", action="store_true", help="give the agent a fresh token (else kept)"
    )
    add.add_argument(
        "--agent-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="one more infer-agent argument, e.g. --agent-arg=--model-dir=/srv/models "
        "(repeatable; kept in the agent's config until the next add)",
    )
    add.add_argument("--config", type=Path, help=f"your config file (default {config_path()})")
    add.add_argument(
        "--wheel-cache",
        type=Path,
        metavar="DIR",
        help=f"dependency wheels kept between runs (default {default_wheel_cache()})",
    )
    add.set_defaults(func=run_add)
    remove = actions.add_parser(
        "remove",
        help="stop a node's agent, remove what node add installed, drop it from your config",
        description="Stops the agent, removes its systemd unit or supervisor, its venv, "
        "config, token, state and log under the prefix, and the node's entry (and token file) "
        "from your config. It never touches engines' model caches, model directories or "
        "Docker volumes and images, and engines the agent started keep running.",
    )
    remove.add_argument("name", help="the node's name in your config")
    remove.add_argument("--prefix", metavar="NODE_DIR", help=PREFIX_HELP)
    remove.add_argument("--config", type=Path, help=f"your config file (default {config_path()})")
    remove.set_defaults(func=run_remove)


def _say(line: str) -> None:
    print(line, flush=True)


def run_add(args: argparse.Namespace) -> int:
    return _guarded("add", lambda: _add(args, _say))


def run_remove(args: argparse.Namespace) -> int:
    return _guarded("remove", lambda: _remove(args, _say))


def _guarded(action: str, body: Callable[[], None]) -> int:
    try:
        body()
    except (NodeSetupError, ConfigError, TunnelError) as exc:
        print(f"infer-top node {action}: {exc}", file=sys.stderr)
        return 1
    return 0


def _configured(config_file: Path, name: str) -> NodeConfig | None:
    text = read_text(config_file)
    nodes = parse_config(text, source=config_file).nodes if text else ()
    return next((n for n in nodes if n.name == name), None)


def _add(args: argparse.Namespace, say: Say) -> None:
    name, destination = args.name, args.ssh
    if not NAME.fullmatch(name):
        raise NodeSetupError(f"node name {name!r}: use letters, digits, '.', '_' or '-'")
    config_file = args.config or config_path()
    existing = _configured(config_file, name)
    if existing is not None and (existing.transport, existing.ssh) != ("ssh", destination):
        raise NodeSetupError(
            f"{config_file} already has a node {name!r} reached at {existing.ssh or existing.url}: "
            f"pick another name, or remove that entry first"
        )
    ssh_config = args.ssh_config.resolve() if args.ssh_config else None
    # an upgrade goes where the agent is: a second copy under the default would fight it
    prefix = args.prefix or (existing.prefix if existing is not None else None)
    remote = Remote(destination, ssh_config)
    say(f"[1/6] checking {destination}")
    probe = remote.call("probe", {"port": args.port, "prefix": prefix}, say)
    check_node(probe, say)
    with tempfile.TemporaryDirectory(prefix="infer-top-node-") as scratch:
        say(f"[2/6] building the agent's wheel from {source_root()}")
        wheel = build_wheel(Path(scratch))
        say("[3/6] gathering its dependencies' wheels")
        cache = args.wheel_cache or default_wheel_cache()
        deps = dependency_wheels(wheel, probe, cache, say)
        say(f"[4/6] installing the agent on {destination}")
        params = {
            "name": name,
            "port": args.port,
            "prefix": prefix,
            "rotate_token": args.rotate_token,
            "agent_args": args.agent_arg,
            "wheel": wheel.name,
            "digest": wheel_digest(wheel),
        }
        with tempfile.TemporaryFile() as archive:
            wheel_archive([wheel, *deps], archive)
            installed = remote.call("install", params, say, stdin=archive)
    node = NodeConfig(
        name=name,
        url=f"http://127.0.0.1:{args.port}",
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


def _remove(args: argparse.Namespace, say: Say) -> None:
    config_file = args.config or config_path()
    node = _configured(config_file, args.name)
    if node is None:
        raise NodeSetupError(f"{config_file} has no node named {args.name!r}")
    if node.transport != "ssh" or node.ssh is None:
        raise NodeSetupError(
            f"node {args.name!r} is reached at {node.url}, not over ssh, so node add did not "
            f"install it: remove its [[nodes]] entry from {config_file} by hand"
        )
    say(f"[1/2] removing the agent from {node.ssh}")
    prefix = args.prefix or node.prefix  # the one node add recorded
    removed = Remote(node.ssh, node.ssh_config).call("remove", {"prefix": prefix}, say)
    if not removed["removed"]:
        say(f"  nothing was installed at {removed['prefix']} on {node.ssh}")
    say(f"[2/2] removing node {args.name} from {config_file}")
    drop_node(config_file, args.name)
    own_token = config_file.parent.resolve() / f"{args.name}.token"
    if node.token_file is not None and node.token_file.resolve() == own_token:
        own_token.unlink(missing_ok=True)
    say(f"node {args.name} removed (model caches and Docker volumes on it were left alone)")
