"""``infer-top models``: the models each node holds (read from their files by the node's
agent) and their removal, one by name, after a confirmation naming it and its size."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import sys
from pathlib import Path

from agents.client import AgentClient
from agents.protocol import ModelInventory, to_dict
from control.config import ConfigError, NodeConfig, load_config
from control.engine_cli import run_node_command
from control.engine_output import (
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
    failure_of,
    print_json,
)
from control.models_pull import add_parser as add_pull_parser
from control.reach import find_node
from control.transport import connected
from engines.model_files import LocalModel, size_text

EPILOG = """\
examples:
  infer-top models ls                      every configured node's models
  infer-top models ls --node h100-a --json
  infer-top models rm Qwen/Qwen2.5-7B-Instruct --node h100-a     asks first, naming its size
  infer-top models rm tiny.gguf --node h100-a --yes              scripts: no question
  infer-top models pull Qwen/Qwen2.5-7B-Instruct --node h100-a --engine vllm
  infer-top models pull bartowski/Llama-3.2-1B-Instruct-GGUF --engine llamacpp --quant Q4_K_M
  infer-top models pull llama3.2 --node jetson --engine ollama

A model is listed from the Hugging Face caches (the engines' cache volume and --cache-dir),
the GGUF files and saved models under the agent's --model-dir, and Ollama's store.
rm deletes exactly the model named (a name, or its path where two share a name) and is
refused while an engine on the node runs it.
pull fetches into the node's Hugging Face cache (the engines' infer-top-hf-cache volume,
else the agent's first --cache-dir) only the files --engine loads, after the hub said
their sizes and the disk has room; a gated model takes your token from $HF_TOKEN.
Ctrl-C cancels it on the node (files already complete are kept for the next pull).

--json: ls prints {"ok", "nodes": [{"node", "models": [MODEL...], "roots", "problems"}],
  "errors": [{"node", "message"}]}; rm prints {"ok", "node", "action", "removed": MODEL};
  pull prints {"ok", "node", "pull": {id source model state revision commit files
  total_bytes done_bytes rate_bytes_per_s message path started_at elapsed_s}}.
MODEL: name source format path root size_bytes revision quantization problem
  arch {architecture layers hidden_size attention_heads kv_heads head_dim max_context
        dtype param_count}
exit status: 0 done; 1 failed (pull: no room on the node, or it failed once begun);
  2 bad arguments, or a question no one could answer (add --yes); 3 agent unreachable;
  4 refused (no such model, in use, policy; pull: the hub's refusal); 130 interrupted
"""


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "models",
        help="the models each node holds; pull one from the hub, remove one by name",
        description="Models on the nodes, as their agents read them from the files; fetched\n"
        "into a node's cache through its agent (pull), or removed by name (rm).",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = p.add_subparsers(dest="models_action", metavar="ACTION", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--config", type=Path, default=None, help="config file naming the nodes")
    common.add_argument("--json", action="store_true", help="one JSON object on stdout")

    ls = actions.add_parser("ls", parents=[common], help="the models a node (or every node) holds")
    ls.add_argument("--node", help="one node named in the config (default: every node)")
    ls.set_defaults(func=run_ls)

    rm = actions.add_parser("rm", parents=[common], help="delete one model from a node")
    rm.add_argument("name", help="the model as `models ls` names it, or its path there")
    rm.add_argument("--node", help="a node named in the config (default: its only node)")
    rm.add_argument("--yes", action="store_true", help="no confirmation (scripts)")
    rm.set_defaults(func=run_rm)

    add_pull_parser(actions, common)


def model_row(m: LocalModel) -> tuple[str, ...]:
    a = m.arch
    shape = "-"
    if a is not None:
        shape = (
            f"{a.layers or '?'}L h{a.hidden_size or '?'} "
            f"{a.attention_heads or '?'}/{a.kv_heads or '?'} heads d{a.head_dim or '?'} "
            f"ctx {a.max_context or '?'}"
        )
    kind = m.format + (f" {m.quantization}" if m.quantization else "")
    if a is not None and a.dtype and not m.quantization:
        kind += f" {a.dtype}"
    return (m.name, m.revision[:12] if m.revision else "-", kind, size_text(m.size_bytes), shape)


def print_inventory(found: ModelInventory) -> None:
    print(f"node {found.node}: {len(found.models)} models")
    for problem in found.problems:
        print(f"  ! {problem}")
    if not found.models:
        print(f"  none under {', '.join(found.roots) or 'no directory: set --model-dir'}")
        return
    rows: list[tuple[str, ...]] = [("NAME", "REVISION", "FORMAT", "SIZE", "ARCHITECTURE")]
    rows += [model_row(m) for m in found.models]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    for row in rows:
        cells = [c.ljust(w) for c, w in zip(row, widths, strict=False)]
        print("  " + "  ".join([*cells, row[-1]]))
    for m in found.models:
        if m.problem:
            print(f"  ! {m.name}: {m.problem}")


def run_ls(args: argparse.Namespace) -> int:
    async def one(node: NodeConfig) -> ModelInventory:
        async with connected(node) as client:
            # named as the config names it: what --node takes
            return dataclasses.replace(await client.models(), node=node.name)

    async def main() -> int:
        nodes = [find_node(args.config, args.node)] if args.node else load_config(args.config).nodes
        found, errors = [], []
        for node in nodes:
            try:
                found.append(await one(node))
            except Exception as exc:
                failure = failure_of(exc, node.name, "ls")
                if failure is None:
                    raise
                errors.append({"node": node.name, "message": failure.message})
                print(f"infer-top models ls: {failure.message}", file=sys.stderr)
        if args.json:
            print_json({"ok": not errors, "nodes": [to_dict(f) for f in found], "errors": errors})
        else:
            for inv in found:
                print_inventory(inv)
        return EXIT_UNREACHABLE if errors and not found else EXIT_OK

    try:
        return asyncio.run(main())
    except ConfigError as exc:
        print(f"infer-top models ls: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED


def confirmed(question: str) -> bool:
    """The operator's yes on a terminal; ConfigError where no one can answer."""
    if not sys.stdin.isatty():
        raise ConfigError(f"{question}: no terminal to ask on; add --yes to remove it")
    return input(f"{question} [y/N] ").strip().lower() in ("y", "yes")


def run_rm(args: argparse.Namespace) -> int:
    async def command(client: AgentClient, node: NodeConfig) -> int:
        matches = [m for m in (await client.models()).models if args.name in (m.name, m.path)]
        if len(matches) == 1 and not args.yes:
            m = matches[0]
            question = (
                f"remove model {m.name} ({size_text(m.size_bytes)}, {m.path}) "
                f"from node {node.name}?"
            )
            if not confirmed(question):
                print("nothing removed", file=sys.stderr)
                return EXIT_OK
        # none or several: the agent says so in its words (404, 409)
        removed = await client.remove_model(args.name)
        if args.json:
            print_json({"ok": True, "node": node.name, "action": "rm", "removed": to_dict(removed)})
        else:
            print(
                f"removed {removed.name} ({size_text(removed.size_bytes)}, {removed.path}) "
                f"from node {node.name}"
            )
        return EXIT_OK

    return run_node_command(args, "rm", command, program="models")
