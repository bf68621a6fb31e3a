"""``infer-top node add NAME --ssh DEST`` and ``infer-top node remove NAME``.

``add`` checks the node, builds this checkout's wheel, gathers its dependencies' wheels,
installs the agent on the node over ssh (``control.node_setup``, ``control.node_remote``),
waits until it answers through an ssh forward, then adds the node to the operator's
config (``control.config_edit``) with its token. Running it again upgrades in place and
keeps the token unless ``--rotate-token``. ``remove`` undoes it on the node and in the config.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from control.config import ConfigError, config_path
from control.config_edit import drop_node
from control.node_add import DEFAULT_PORT, NodeAddRequest, add_node, configured
from control.node_setup import NodeSetupError, Remote, Say, default_wheel_cache
from control.ssh_tunnel import TunnelError

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
        "--port",
        type=int,
        default=DEFAULT_PORT,
        help=f"the agent's port on the node's loopback ({DEFAULT_PORT})",
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


def _add(args: argparse.Namespace, say: Say) -> None:
    request = NodeAddRequest(
        name=args.name,
        destination=args.ssh,
        config_file=args.config or config_path(),
        ssh_config=args.ssh_config,
        port=args.port,
        prefix=args.prefix,
        rotate_token=args.rotate_token,
        agent_args=tuple(args.agent_arg),
        wheel_cache=args.wheel_cache,
    )
    add_node(request, say)


def _remove(args: argparse.Namespace, say: Say) -> None:
    config_file = args.config or config_path()
    node = configured(config_file, args.name)
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
