"""``infer-top engine``: start, stop, swap and inspect engines on a configured node without
a screen (scripts, SSH one-liners, a nightly swap-and-benchmark job).

It speaks the same agent API as the TUI's Engines screen, through the same client and
steps (``control.engine_ops``), so the node's policy answers both the same way.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from agents.client import AgentClient
from agents.protocol import to_dict
from control.config import ConfigError, NodeConfig, load_config
from control.engine_ops import start_engine, stop_engine, swap_engine
from control.engine_output import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_REFUSED,
    EXIT_USAGE,
    CommandFailure,
    ProgressView,
    engine_json,
    engine_rows,
    failure_of,
    print_json,
    print_table,
    report_failure,
    service_rows,
)
from control.model_fetch import missing_model, pull_for_start
from control.nodes import LaunchFields
from control.reach import find_node
from control.transport import connected
from runs.units import duration_arg

EPILOG = """\
examples:
  infer-top engine ls --node h100-a
  infer-top engine start llamacpp --node h100-a --model /models/tiny.gguf --max-num-seqs 4
  infer-top engine start vllm --node h100-a --model meta-llama/Llama-3.1-8B-Instruct \\
      --gpus 0,1 --set tensor_parallel=2 --health-timeout 30m --json
  infer-top engine swap 3fa2c1d0e9 --node h100-a --kind sglang --model Qwen/Qwen2.5-7B-Instruct
  infer-top engine start vllm --node h100-a --model Qwen/Qwen2.5-0.5B-Instruct --pull
  infer-top engine logs 3fa2c1d0e9 --node h100-a -f --for 2m
  infer-top engine stop 3fa2c1d0e9 --node h100-a          # keeps its volumes (model caches)
  infer-top engine stop 3fa2c1d0e9 --node h100-a --remove-volumes   # deletes them, named

  ssh ops@bastion infer-top engine ls --json | jq -r '.engines[] | "\\(.id) \\(.health)"'

--node may be left out when the config names exactly one node.

--json prints one JSON object on stdout (progress and errors go to stderr):
  ls     {"ok", "node", "engines": [ENGINE...], "services": [SERVICE...]}
  start  {"ok", "node", "action", "engine": ENGINE, "elapsed_s"}
  swap   {"ok", "node", "action", "engine": ENGINE, "previous": {"kind", "model"}, "swap_s"}
  stop   {"ok", "node", "action", "engine_id", "volumes_kept", "volumes_removed"}
  scale  {"ok", "node", "action", "engine": ENGINE, "replicas"}
  logs   one {"engine_id", "line"} per line (JSON lines)
  error  {"ok": false, "node", "action", "error": {"code", "message", ...}}
ENGINE: id kind runtime state health url port gpu_ids model config simulated started_at
  healthy_at start_timeout_s message last_log_line exit_code volumes image_pull
SERVICE (a Swarm service this node's agent deployed; each replica is an ENGINE of the
  node running it): id kind runtime state (deployed | missing) replicas (asked for)
  running (null: Swarm did not answer) nodes placement port config message
image_pull (Compose engines): null, or {"image", "state": present | pulling | pulled,
  "done_bytes", "total_bytes", "layers_done", "layers_total"}
error codes: config unreachable unauthorized refused_by_policy not_found refused
  start_failed (with phase, last_log_line, engine) swap_failed agent_error
  model_absent pull_failed (start: a Hugging Face model not on the node, see --pull)

exit status: 0 done; 1 the engine failed (not healthy, swap rolled back), or its model's
  pull; 2 bad arguments or config (unknown node); 3 agent unreachable; 4 refused by the
  agent (policy, no such engine, bad request), or its model is not on the node; 130
  interrupted
"""


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "engine",
        help="start, stop, swap, list and tail engines on a configured node (scripts, SSH)",
        description="Engine control without a screen, through the node's agent: the same API "
        "and policy as the TUI's Engines screen.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = p.add_subparsers(dest="engine_action", metavar="ACTION", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--node", help="a node named in the config (default: its only node)")
    common.add_argument("--config", type=Path, default=None, help="config file naming the nodes")
    common.add_argument("--json", action="store_true", help="one JSON object on stdout")

    ls = actions.add_parser(
        "ls", parents=[common], help="the engines the node runs, and Swarm services it deployed"
    )
    ls.set_defaults(func=run_ls)

    start = actions.add_parser("start", parents=[common], help="start an engine, wait for health")
    start.add_argument("kind", help="engine kind (llamacpp, vllm, sglang, ... or sim)")
    _launch_arguments(start)
    start.add_argument("--runtime", choices=("compose", "process", "swarm", "sim"), default=None)
    swarm = start.add_argument_group("Swarm (--runtime swarm, asked of a manager node's agent)")
    swarm.add_argument("--place-node", help="run the replicas on this Swarm node (host name)")
    swarm.add_argument(
        "--place-label", metavar="KEY=VALUE", help="run the replicas on nodes with this label"
    )
    swarm.add_argument("--replicas", type=int, default=None, help="replica count (default 1)")
    start.add_argument("--gpus", type=_gpu_list, default=[], help="GPU indices, e.g. 0,1")
    start.add_argument("--model-dir", help="host directory mounted as the engine's models")
    fetch = start.add_mutually_exclusive_group()
    fetch.add_argument(
        "--pull",
        action="store_true",
        help="a Hugging Face model not on the node is pulled first, with progress (no question)",
    )
    fetch.add_argument(
        "--allow-download",
        action="store_true",
        help="start even where the model is not on the node: the engine downloads it itself",
    )
    start.set_defaults(func=run_start)

    swap = actions.add_parser(
        "swap", parents=[common], help="replace an engine in place (same GPUs and port)"
    )
    swap.add_argument("engine_id")
    swap.add_argument("--kind", help="the new engine's kind (default: the same as now)")
    _launch_arguments(swap)
    swap.set_defaults(func=run_swap)

    stop = actions.add_parser("stop", parents=[common], help="stop an engine (volumes stay)")
    stop.add_argument("engine_id")
    stop.add_argument(
        "--remove-volumes",
        action="store_true",
        help="also delete the named Docker volumes it mounts (its model caches: downloaded "
        "models are lost); they are printed before they go",
    )
    stop.add_argument("--quiet", action="store_true", help="no progress on stderr")
    stop.set_defaults(func=run_stop)

    scale = actions.add_parser(
        "scale", parents=[common], help="set a Swarm service's replica count (manager's agent)"
    )
    scale.add_argument("engine_id")
    scale.add_argument("replicas", type=int)
    scale.set_defaults(func=run_scale)

    logs = actions.add_parser("logs", parents=[common], help="an engine's log")
    logs.add_argument("engine_id")
    logs.add_argument("--tail", type=int, default=100, help="lines from the end (default 100)")
    logs.add_argument("-f", "--follow", action="store_true", help="keep printing new lines")
    logs.add_argument(
        "--for",
        dest="for_s",
        type=duration_arg,
        default=None,
        help="with -f: stop following after this long, e.g. 30s or 5m",
    )
    logs.add_argument("--max-lines", type=int, default=None, help="stop after this many lines")
    logs.set_defaults(func=run_logs)


def _launch_arguments(p: argparse.ArgumentParser) -> None:
    launch_field_arguments(p)
    p.add_argument(
        "--health-timeout",
        type=duration_arg,
        default=None,
        help="how long the agent waits for health (default: the engine spec's), e.g. 30m",
    )
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")


def launch_field_arguments(p: argparse.ArgumentParser, *, on_node: bool = True) -> None:
    """The options that name launch fields (``launch_fields`` reads them): shared with
    ``infer-top k8s render`` (``on_node`` False), which renders the same fields into
    manifests."""
    simulator = " (a simulator takes --set profile=NAME)" if on_node else ""
    p.add_argument("--model", help=f"the model to serve{simulator}")
    image = "must be allow-listed on the node" if on_node else "default: the catalog's pinned tag"
    p.add_argument("--image", help=f"container image ({image})")
    p.add_argument("--max-num-seqs", type=int, help="concurrent sequences the engine runs")
    p.add_argument("--context-len", type=int, help="context length per sequence")
    p.add_argument(
        "--extra-arg",
        action="append",
        default=[],
        help="a tuning flag the engine's spec allows, e.g. --extra-arg=--threads=1",
    )
    p.add_argument(
        "--set",
        dest="settings",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="any other launch field, VALUE as JSON where it parses: tensor_parallel=2",
    )


def _gpu_list(text: str) -> list[int]:
    try:
        gpus = [int(g) for g in text.split(",") if g.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected GPU indices like 0,1, got {text!r}") from None
    if any(g < 0 for g in gpus):
        raise argparse.ArgumentTypeError("GPU indices are non-negative")
    return gpus


def launch_fields(args: argparse.Namespace) -> LaunchFields:
    """The launch config the options name (``--set`` last, so it can say anything)."""
    fields: LaunchFields = {}
    named = {
        "model": args.model,
        "image": args.image,
        "max_num_seqs": args.max_num_seqs,
        "context_len": args.context_len,
    }
    fields.update({k: v for k, v in named.items() if v is not None})
    if args.extra_arg:
        fields["extra_args"] = list(args.extra_arg)
    for setting in args.settings:
        name, sep, raw = setting.partition("=")
        if not sep or not name.strip():
            raise ConfigError(f"--set wants FIELD=VALUE, got {setting!r}")
        try:
            fields[name.strip()] = json.loads(raw)
        except ValueError:
            fields[name.strip()] = raw  # a plain word: a string
    if "model" not in fields and "profile" not in fields:
        raise ConfigError("name the model with --model (a simulator: --set profile=NAME)")
    return fields


def pick_node(config_file: Path | None, name: str | None) -> NodeConfig:
    """The node ``--node`` names, else the config's only one."""
    if name is not None:
        return find_node(config_file, name)
    nodes = load_config(config_file).nodes
    if len(nodes) == 1:
        return nodes[0]
    known = ", ".join(n.name for n in nodes) or "none configured: add [[nodes]] to the config"
    raise ConfigError(f"name the node with --node (nodes: {known})")


Command = Callable[[AgentClient, NodeConfig], Awaitable[int]]


def run_node_command(
    args: argparse.Namespace, action: str, command: Command, *, program: str = "engine"
) -> int:
    """Resolve the node (``args.node``, ``args.config``), run ``command`` against its
    agent, and turn what went wrong into words and an exit code (``infer-top PROGRAM
    ACTION: ...``; ``args.json``: as JSON too)."""
    node_name: str | None = args.node

    async def main() -> int:
        nonlocal node_name
        node = pick_node(args.config, args.node)
        node_name = node.name
        async with connected(node) as client:
            return await command(client, node)

    try:
        return asyncio.run(main())
    except KeyboardInterrupt:
        print(f"infer-top {program} {action}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as exc:
        failure = failure_of(exc, node_name or "?", action)
        if failure is None:
            raise
        return report_failure(
            failure, node=node_name, action=action, as_json=args.json, command=program
        )


def run_ls(args: argparse.Namespace) -> int:
    async def command(client: AgentClient, node: NodeConfig) -> int:
        engines, services = await client.listing()
        if args.json:
            print_json(
                {
                    "ok": True,
                    "node": node.name,
                    "engines": [engine_json(e) for e in engines],
                    "services": [to_dict(s) for s in services],
                }
            )
            return EXIT_OK
        if engines:
            print_table(engine_rows(engines))
        elif not services:
            print(f"node {node.name} runs no engine")
        if services:
            print(f"{chr(10) if engines else ''}Swarm services deployed from node {node.name}:")
            print_table(service_rows(services))
        return EXIT_OK

    return run_node_command(args, "ls", command)


def run_start(args: argparse.Namespace) -> int:
    async def command(client: AgentClient, node: NodeConfig) -> int:
        fields = launch_fields(args)
        options = start_options(args)
        if not args.allow_download and (absent := await model_absent(client, args, fields)):
            return report_failure(absent, node=node.name, action="start", as_json=args.json)
        began = time.monotonic()
        with ProgressView(quiet=args.quiet) as view:
            info = await start_engine(
                client,
                args.kind,
                fields,
                args.gpus,
                view,
                runtime=args.runtime,
                options=options,
                health_timeout_s=args.health_timeout,
            )
        elapsed_s = round(time.monotonic() - began, 3)
        if args.json:
            result = {"ok": True, "node": node.name, "action": "start"}
            print_json(result | {"engine": engine_json(info), "elapsed_s": elapsed_s})
        elif info.state == "deployed":
            print(f"{info.id} {info.kind} deployed from node {node.name}: {info.message}")
        else:
            print(f"{info.id} {info.kind} healthy at {info.url} on node {node.name} "
                  f"({elapsed_s:.1f} s)")  # fmt: skip
        return EXIT_OK

    return run_node_command(args, "start", command)


def start_options(args: argparse.Namespace) -> dict[str, object] | None:
    """The start request's options: the model mount, and a Swarm service's placement."""
    options: dict[str, object] = {"model_dir": args.model_dir} if args.model_dir else {}
    placement = {
        k: v for k, v in (("node", args.place_node), ("label", args.place_label)) if v is not None
    }
    if placement:
        options["placement"] = placement
    if args.replicas is not None:
        options["replicas"] = args.replicas
    if (placement or args.replicas is not None) and args.runtime != "swarm":
        raise ConfigError("--place-node, --place-label and --replicas go with --runtime swarm")
    return options or None


def run_scale(args: argparse.Namespace) -> int:
    async def command(client: AgentClient, node: NodeConfig) -> int:
        info = await client.scale(args.engine_id, args.replicas)
        if args.json:
            result = {"ok": True, "node": node.name, "action": "scale", "engine": engine_json(info)}
            print_json(result | {"replicas": args.replicas})
        else:
            print(f"{info.id} scaled to {args.replicas} replica(s) from node {node.name}")
        return EXIT_OK

    return run_node_command(args, "scale", command)


async def model_absent(
    client: AgentClient, args: argparse.Namespace, fields: LaunchFields
) -> CommandFailure | None:
    """None once the Hugging Face model the start names is on the node: there already,
    or pulled now (``--pull``, or the operator's yes on a terminal); else why not."""
    missing = await missing_model(client, args.kind, fields.get("model"))
    if missing is None:
        return None
    if args.pull or (sys.stdin.isatty() and _yes(f"{missing}: pull it now?")):
        pulled = await pull_for_start(client, args.kind, str(fields["model"]), quiet=args.quiet)
        if pulled.state == "done":
            return None
        return CommandFailure("pull_failed", f"{pulled.message}; nothing started", EXIT_FAILED)
    hint = (
        f"pull it first (infer-top models pull {fields['model']} --node "
        f"{args.node or '<node>'} --engine {args.kind}), or start with --pull; "
        "--allow-download lets the engine download it itself, showing nothing"
    )
    return CommandFailure("model_absent", f"{missing}: {hint}", EXIT_REFUSED)


def _yes(question: str) -> bool:
    return input(f"{question} [y/N] ").strip().lower() in ("y", "yes")


def run_swap(args: argparse.Namespace) -> int:
    async def command(client: AgentClient, node: NodeConfig) -> int:
        fields = launch_fields(args)
        before = await client.engine(args.engine_id)
        previous = {"kind": before.kind, "model": before.config.get("model")}
        began = time.monotonic()
        with ProgressView(quiet=args.quiet) as view:
            info = await swap_engine(
                client,
                args.engine_id,
                fields,
                view,
                kind=args.kind,
                health_timeout_s=args.health_timeout,
            )
        swap_s = round(time.monotonic() - began, 3)
        if args.json:
            result = {"ok": True, "node": node.name, "action": "swap", "engine": engine_json(info)}
            print_json(result | {"previous": previous, "swap_s": swap_s})
        else:
            print(f"{info.id}: {before.kind} -> {info.kind}, healthy at {info.url} on node "
                  f"{node.name}; swap took {swap_s:.1f} s")  # fmt: skip
        return EXIT_OK

    return run_node_command(args, "swap", command)


def run_stop(args: argparse.Namespace) -> int:
    async def command(client: AgentClient, node: NodeConfig) -> int:
        info = await client.engine(args.engine_id)
        removed = list(info.volumes) if args.remove_volumes else []
        kept = [v for v in info.volumes if v not in removed]
        if removed:  # said before it happens: this deletes data
            print(f"removing volumes of {info.id} (their data is deleted): {', '.join(removed)}",
                  file=sys.stderr, flush=True)  # fmt: skip
        elif args.remove_volumes:
            print(f"{info.id} mounts no named volumes: none removed", file=sys.stderr)
        with ProgressView(quiet=args.quiet) as view:
            await stop_engine(client, info.id, view, remove_volumes=removed)
        if args.json:
            result = {"ok": True, "node": node.name, "action": "stop", "engine_id": info.id}
            print_json(result | {"volumes_kept": kept, "volumes_removed": removed})
            return EXIT_OK
        print(f"{info.id} stopped on node {node.name}")
        if removed:
            print(f"removed volumes: {', '.join(removed)}")
        if kept:
            print(f"kept volumes: {', '.join(kept)} (infer-top engine stop --remove-volumes "
                  "deletes them with the engine)")  # fmt: skip
        return EXIT_OK

    return run_node_command(args, "stop", command)


def run_logs(args: argparse.Namespace) -> int:
    if args.for_s is not None and not args.follow:
        print("infer-top engine logs: --for goes with -f", file=sys.stderr)
        return EXIT_USAGE

    async def command(client: AgentClient, node: NodeConfig) -> int:
        printed = 0

        async def pump() -> None:
            nonlocal printed
            async for line in client.logs(args.engine_id, max(0, args.tail), args.follow):
                text = json.dumps({"engine_id": args.engine_id, "line": line})
                print(text if args.json else line, flush=True)
                printed += 1
                if args.max_lines is not None and printed >= args.max_lines:
                    return

        if args.for_s is None:
            await pump()
            return EXIT_OK
        try:
            async with asyncio.timeout(args.for_s) as bound:
                await pump()
        except TimeoutError:
            if not bound.expired():
                raise
        return EXIT_OK

    return run_node_command(args, "logs", command)
