"""``infer-top``: the operator's command line.

With no sub-command it opens the TUI.  Each sub-command lives next to the
domain code it drives and registers itself here through ``register(sub)``, so
this module stays a table of contents.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from tui import __version__

# name -> module with ``register(subparsers)``; order is the order in --help.
SUBCOMMANDS: tuple[str, ...] = (
    "tui.commands",  # (default) open the TUI
    "tui.demo",  # demo
    "control.bench",  # bench
    "control.engine_cli",  # engine
    "control.models_cli",  # models
    "control.node_cli",  # node
    "control.k8s_cli",  # k8s
    "sim.cli",  # sim
    "store.cli",  # runs
    "control.compare_cli",  # compare
    "control.report_cli",  # report
    "control.alerts_cli",  # alerts
    "control.config_cli",  # config
)

EPILOG = """\
examples:
  infer-top                     open the TUI on the nodes in your config (or this machine)
  infer-top demo                try every screen with replayed H200 telemetry and simulated engines
  infer-top bench --url http://127.0.0.1:8080 --model tiny --concurrency 1,2,4,8
  infer-top engine ls --node h100-a --json
  infer-top models ls --node h100-a      the models the node holds, read from their files
  infer-top node add jetson --ssh jetson   install the agent on a lab node over ssh
  infer-top k8s render vllm --model Qwen/Qwen2.5-7B-Instruct | kubectl apply -f -
  infer-top engine swap 3fa2c1d0e9 --node h100-a --kind vllm --model Qwen/Qwen2.5-7B-Instruct
  infer-top sim --profile h100-llama2-7b-vllm --port 8000
  infer-top runs list
  infer-top compare --baseline 3fa2c1 9b7e04   exit 1 when the run regressed against the baseline
  infer-top report 3fa2c1 9b7e04 -o report.html   one self-contained HTML file to share
  infer-top alerts --since 24h --json
  infer-top config init         write a commented config file (every default), then edit it
  infer-top config show         the config in force and the file it came from

Config: $XDG_CONFIG_HOME/infer-top/config.toml   Data: $XDG_DATA_HOME/infer-top/infer-top.db
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="infer-top",
        description="htop for LLM inference fleets: watch GPUs and engines live, start and "
        "swap engines on nodes, run load tests and compare engines side by side.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"infer-top {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in SUBCOMMANDS:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            # Only tolerate the command module itself being absent (a partial
            # install); a missing dependency inside it is a real error.
            if exc.name is None or not (name == exc.name or name.startswith(exc.name + ".")):
                raise
            continue
        module.register(sub)
    return parser


def _command_names(parser: argparse.ArgumentParser) -> set[str]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return set(action.choices)
    return set()


def _command_first(args: list[str], commands: set[str]) -> list[str]:
    """``infer-top --db X runs list`` as ``infer-top runs list --db X``: options given before
    the sub-command are its own (each sub-command declares the options it takes, so one
    it does not know is refused by name)."""
    if not args or not args[0].startswith("-") or args[0] in {"-h", "--help", "--version"}:
        return args
    for i, arg in enumerate(args):
        if arg in commands:
            return [arg, *args[i + 1 :], *args[:i]]
    return args


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    commands = _command_names(parser)
    args_in = _command_first(list(sys.argv[1:] if argv is None else argv), commands)
    # No sub-command means the TUI itself (registered by tui.commands as "tui"),
    # so `infer-top --config F` works like `infer-top tui --config F`.
    first = args_in[0] if args_in else None
    if first not in commands and first not in {"-h", "--help", "--version"}:
        args_in = ["tui", *args_in]
    args = parser.parse_args(args_in)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
