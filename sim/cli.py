"""``infer-top sim``: serve a simulated engine on a port (or list the profiles)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import statistics
import sys
from typing import Any

from sim.app import start_sim
from sim.faults import FaultConfig
from sim.profile import ProfileError, SimProfile, list_profiles, load_profile
from sim.scheduler import Outcome
from sim.simulate import simulate_closed_loop

EXIT_CRASHED = 70
"""Exit status after a simulated crash (--fault-crash-after), like an engine that died."""


def register(sub: Any) -> None:
    p = sub.add_parser(
        "sim",
        help="serve a simulated inference engine (timing model + metrics dialect)",
        description="Serve an OpenAI-compatible simulated engine whose timing follows a "
        "scheduler model (slots, KV pool, prefill rate, batch-dependent step time) and whose "
        "/metrics speak the imitated engine's dialect. Everything it serves is labelled "
        "simulated (owned_by infer-top-sim, X-Infer-Top-Simulated: 1, infer_top_simulated 1).",
    )
    p.add_argument("--list", action="store_true", help="list the shipped profiles and exit")
    p.add_argument("--profile", help="profile name (see --list) or path to a TOML file")
    p.add_argument(
        "--calibrate",
        metavar="LEVELS",
        help="print the profile's closed-loop tok/s, TTFT and failures at these concurrency "
        "levels (e.g. 1,8,64; 512 prompt / 256 output tokens, virtual time) and exit",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="port (default 8000; 0 = any free)")
    p.add_argument(
        "--time-scale",
        type=float,
        default=None,
        help="real seconds per simulated second (10 = ten times slower; default: the profile's)",
    )
    p.add_argument("--seed", type=int, default=0, help="seed for output lengths, text, faults")
    p.add_argument("--load-time-s", type=float, default=None, help="seconds of model loading")
    p.add_argument("--fault-error-rate", type=float, default=0.0, help="fraction answered 500")
    p.add_argument("--fault-drop-rate", type=float, default=0.0, help="fraction of streams cut")
    p.add_argument("--fault-stall-s", type=float, default=0.0, help="pause mid-stream, seconds")
    p.add_argument(
        "--fault-stall-rate", type=float, default=1.0, help="fraction of streams that stall"
    )
    p.add_argument(
        "--fault-crash-after", type=int, default=None, help="die when request N+1 arrives"
    )
    p.set_defaults(func=run)


def _print_list() -> None:
    rows = [load_profile(name) for name in list_profiles()]
    width = max(len(r.name) for r in rows)
    for r in rows:
        print(f"{r.name:<{width}}  {r.kind:<9} {r.model}  [{r.hardware}]")


def run(args: argparse.Namespace) -> int:
    if args.list:
        _print_list()
        return 0
    if not args.profile:
        print("infer-top sim: --profile NAME is required (see --list)", file=sys.stderr)
        return 2
    try:
        profile = load_profile(args.profile)
        faults = FaultConfig(
            error_rate=args.fault_error_rate,
            drop_rate=args.fault_drop_rate,
            stall_rate=args.fault_stall_rate if args.fault_stall_s > 0 else 0.0,
            stall_s=args.fault_stall_s,
            crash_after=args.fault_crash_after,
            load_time_s=args.load_time_s,
        )
        if args.time_scale is not None and not args.time_scale > 0:
            raise ValueError("--time-scale must be > 0")
    except (ProfileError, ValueError) as exc:
        print(f"infer-top sim: {exc}", file=sys.stderr)
        return 2
    if args.calibrate:
        return _calibrate(profile, args.calibrate)
    try:
        return asyncio.run(_serve(profile, args, faults))
    except OSError as exc:
        print(f"infer-top sim: cannot serve on {args.host}:{args.port}: {exc}", file=sys.stderr)
        return 1


def _calibrate(profile: SimProfile, levels_text: str) -> int:
    try:
        levels = [int(x) for x in levels_text.split(",")]
        if not levels or min(levels) < 1:
            raise ValueError
    except ValueError:
        print(f"infer-top sim: --calibrate wants levels like 1,8,64, got {levels_text!r}",
              file=sys.stderr)  # fmt: skip
        return 2
    print(f"# {profile.name}: closed loop, 512 prompt / 256 output tokens, virtual time")
    print("concurrency  output_tok/s  ttft_p50_s  failed")
    for level in levels:
        traces = simulate_closed_loop(
            profile, concurrency=level, requests=level * 6, prompt_tokens=512, output_tokens=256
        )
        ok = [t for t in traces if t.outcome is Outcome.OK]
        span = max(t.finished_s or 0.0 for t in traces) - min(t.arrival_s for t in traces)
        tokens = sum(t.output_tokens for t in ok)
        ttft = statistics.median(t.ttft_s or 0.0 for t in ok) if ok else float("nan")
        print(f"{level:11d}  {tokens / span:12.1f}  {ttft:10.3f}  {len(traces) - len(ok):6d}")
    return 0


async def _serve(profile: SimProfile, args: argparse.Namespace, faults: FaultConfig) -> int:
    sim = await start_sim(
        profile,
        host=args.host,
        port=args.port,
        seed=args.seed,
        time_scale=args.time_scale,
        faults=faults,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    previous = sim.server.on_crash

    def crashed() -> None:
        if previous is not None:
            previous()
        stop.set()

    sim.server.on_crash = crashed
    print(
        f"SIMULATED {profile.kind} engine, profile {profile.name} ({profile.model}, "
        f"{profile.hardware}) on {sim.url} — not a measurement of real hardware",
        flush=True,
    )
    await stop.wait()
    await sim.stop()
    if sim.crashed:
        print(f"infer-top sim: simulated crash after {faults.crash_after} requests", flush=True)
        return EXIT_CRASHED
    return 0
