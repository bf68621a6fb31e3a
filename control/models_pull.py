"""``infer-top models pull``: fetch a model into a node's cache through its agent, with
a progress bar of the bytes and rate the agent streams; Ctrl-C cancels the pull on the
node."""

from __future__ import annotations

import argparse
import sys

from agents.client import AgentClient
from agents.protocol import to_dict
from control.config import NodeConfig
from control.engine_cli import run_node_command
from control.engine_output import EXIT_FAILED, EXIT_OK, print_json
from control.model_fetch import follow, hub_token
from engines.model_files import size_text


def add_parser(
    actions: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    pull = actions.add_parser(
        "pull",
        parents=[common],
        help="fetch a model into a node's cache, with progress",
        description="Fetch a Hugging Face repository (only the files the engine loads) or, "
        "with --engine ollama, an Ollama tag into the node's model cache.",
    )
    pull.add_argument("model", help="ORG/NAME[:REVISION], or an Ollama tag with --engine ollama")
    pull.add_argument("--node", help="a node named in the config (default: its only node)")
    pull.add_argument(
        "--engine",
        help="the engine it is for: its files only (llamacpp: one GGUF; vllm, sglang...: "
        "safetensors without .bin duplicates; ollama: Ollama's own pull)",
    )
    pull.add_argument("--quant", help="the GGUF quantisation to fetch (Q4_K_M), or the file's name")
    pull.add_argument(
        "--hub-token-env",
        default="HF_TOKEN",
        metavar="VAR",
        help="the variable holding your hub token for gated models (default HF_TOKEN); sent "
        "to the node's agent for this pull only",
    )
    pull.set_defaults(func=run_pull)


def run_pull(args: argparse.Namespace) -> int:
    async def command(client: AgentClient, node: NodeConfig) -> int:
        model, revision = args.model, None
        if args.engine != "ollama" and ":" in model:
            model, _, revision = model.partition(":")
        pull = await client.pull_model(
            model,
            revision=revision,
            engine=args.engine,
            quant=args.quant,
            hub_token=hub_token(args.hub_token_env),
        )
        final = await follow(client, pull, quiet=args.json)  # Ctrl-C cancels it on the node
        if args.json:
            print_json({"ok": final.state == "done", "node": node.name, "pull": to_dict(final)})
        elif final.state == "done":
            print(
                f"{final.model}: {size_text(final.total_bytes or 0)} on node {node.name} "
                f"({final.path or final.message}); infer-top models ls --node {node.name}"
            )
            ggufs = [f for f in final.files if f.endswith(".gguf")]
            if ggufs and final.path:  # llama.cpp names the file, not the repo
                print(f"its GGUF file on the node: {final.path}/{ggufs[0]}")
        else:
            print(f"infer-top models pull: {final.message}", file=sys.stderr)
        return EXIT_OK if final.state == "done" else EXIT_FAILED

    return run_node_command(args, "pull", command, program="models")
