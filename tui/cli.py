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
    "tui.commands",          # (default) open the TUI
    "tui.demo",              # demo
    "engines.loadgen.cli",   # bench
    "engines.sim.cli",       # sim
    "store.cli",             # runs
)

EPILOG = """\
examples:
  infer-top                     open the TUI on the nodes in your config (or this machine)
  infer-top demo                try every screen with replayed H200 telemetry and simulated engines
  infer-top bench --url http://127.0.0.1:8080 --model tiny --concurrency 1,2,4,8
  infer-top sim --profile h100-llama2-7b-vllm --port 8000
  infer-top runs list

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


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    func = getattr(args, "func", None)
    if func is None:
        # No sub-command: the TUI itself (registered by tui.commands as "tui").
        args = parser.parse_args(["tui", *(argv if argv is not None else sys.argv[1:])])
        func = args.func
    return int(func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
