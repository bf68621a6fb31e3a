"""``infer-top demo``: open the app on the demo's services (wired in :mod:`control.demo`)."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from control.demo import DemoOptions


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "demo",
        help="try every screen: replayed H200 telemetry, simulated engines",
        description="Start an embedded agent that replays a real H200 recording and runs "
        "simulated engines (clearly labelled), precompute the seed's H100 comparison, and "
        "open the TUI.  Needs no GPU and no Docker.  Quitting stops every engine the demo "
        "started (a real llama.cpp container too).",
    )
    p.add_argument("--gpus", type=int, default=8, help="replayed GPUs (default 8)")
    p.add_argument(
        "--db",
        type=Path,
        default=None,
        help="keep the demo's runs in this SQLite file (default: a temporary one)",
    )
    p.add_argument("--no-sims", action="store_true", help="start no simulated engines")
    p.add_argument(
        "--no-runs", action="store_true", help="skip precomputing the simulated comparison"
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.gpus < 1 or args.gpus > 64:
        print("infer-top demo: --gpus must be 1-64", file=sys.stderr)
        return 2
    from control.demo import DemoOptions

    options = DemoOptions(gpus=args.gpus, db=args.db, sims=not args.no_sims, runs=not args.no_runs)
    return asyncio.run(_main(options))


async def _main(options: DemoOptions) -> int:
    from control.demo import demo_services, real_engine
    from tui.app import create_app

    real = await asyncio.to_thread(real_engine)
    async with demo_services(options, real) as (config, services):
        app = create_app(config, services=services)
        await app.run_async()
    return int(app.return_code or 0)
