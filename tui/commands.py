"""The default sub-command: open the TUI."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from control.config import Config


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("tui", help="open the TUI (the default when no command is given)")
    p.add_argument(
        "--config",
        type=Path,
        default=None,
        help="config file (default: $XDG_CONFIG_HOME/infer-top/config.toml)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from control.config import ConfigError, load_config

    try:
        config = load_config(args.config)
    except ConfigError as exc:
        print(f"infer-top: {exc}", file=sys.stderr)
        return 2
    return asyncio.run(_main(config))


async def _main(config: Config) -> int:
    from control.wiring import build_services
    from tui.app import create_app

    async with build_services(config) as services:
        app = create_app(config, services=services)
        await app.run_async()
    return int(app.return_code or 0)
