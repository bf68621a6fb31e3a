"""The default sub-command: open the TUI."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("tui", help="open the TUI (the default when no command is given)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    raise SystemExit("infer-top: the TUI is not built yet")
