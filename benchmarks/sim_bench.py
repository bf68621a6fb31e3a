"""How many concurrent streams and chunks/s one simulator process serves here.

The simulator runs in its own process (as ``infer-top sim`` would); this process
is the client: N concurrent streaming chat requests, closed loop, for a fixed
window per level.  For each level it prints what the timing model asked for
(tokens/s of the server's ground truth, in real seconds), what the client
received, and how far the engine loop fell behind its schedule (max lag).
Where "received" falls short of "modelled", the machine, not the model, is the
limit.

Run: ``.venv/bin/python -m benchmarks.sim_bench [--seconds 6] [--levels 16,64,256,512]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import platform
import time
from typing import Any

import aiohttp

PROFILE = "h100-llama2-7b-vllm"


def _serve(port_q: Any, stop_ev: Any, time_scale: float) -> None:
    from sim import load_profile, start_sim

    async def main() -> None:
        profile = load_profile(PROFILE).with_overrides(max_num_seqs=1024, kv_blocks=200_000)
        sim = await start_sim(profile, port=0, time_scale=time_scale)
        port_q.put(sim.port)
        await asyncio.get_running_loop().run_in_executor(None, stop_ev.wait)
        await sim.stop()

    asyncio.run(main())


async def _level(url: str, concurrency: int, seconds: float) -> dict[str, float]:
    body = json.dumps(
        {
            "messages": [{"role": "user", "content": "Benchmark the simulator, please."}],
            "max_tokens": 128,
            "ignore_eos": True,
            "stream": True,
        }
    ).encode()
    chunks = 0
    failures = 0
    deadline = time.monotonic() + seconds
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as s:
        async with s.get(url + "/infer-top/ground-truth?reset_lag=1") as r:
            before = len((await r.json())["traces"])

        async def client() -> None:
            nonlocal chunks, failures
            while time.monotonic() < deadline:
                try:
                    async with s.post(
                        url + "/v1/chat/completions",
                        data=body,
                        headers={"Content-Type": "application/json"},
                    ) as r:
                        async for line in r.content:
                            if line.startswith(b"data: {"):
                                chunks += 1
                except aiohttp.ClientError:
                    failures += 1

        start = time.monotonic()
        await asyncio.gather(*(client() for _ in range(concurrency)))
        wall = time.monotonic() - start
        async with s.get(url + "/infer-top/ground-truth") as r:
            truth = await r.json()
    traces = truth["traces"][before:]
    tokens = sum(len(t["token_times_s"]) for t in traces)
    first = min(t["arrival_s"] for t in traces)
    last = max(t["finished_s"] for t in traces)
    # Chunks include the role, finish and usage-less framing: 2 extra per request.
    return {
        "streams": concurrency,
        "requests": len(traces),
        "modelled_tok_s": tokens / (last - first),
        "received_chunks_s": chunks / wall,
        "received_tok_s": (chunks - 2 * len(traces)) / wall,
        "max_lag_ms": truth["max_lag_s"] * 1000.0,
        "failures": failures,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=6.0)
    ap.add_argument("--levels", default="16,64,256,512")
    ap.add_argument("--time-scale", type=float, default=0.25, help="4x faster than the model")
    args = ap.parse_args()
    ctx = mp.get_context("spawn")
    port_q, stop_ev = ctx.Queue(), ctx.Event()
    proc = ctx.Process(target=_serve, args=(port_q, stop_ev, args.time_scale), daemon=True)
    proc.start()
    try:
        url = f"http://127.0.0.1:{port_q.get(timeout=30)}"
        print(
            f"# sim_bench: profile {PROFILE} (max_num_seqs 1024), time_scale {args.time_scale}, "
            f"{args.seconds:g}s per level, 128-token streams"
        )
        when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        print(
            f"# machine: {platform.node()} {platform.machine()} {os.cpu_count()} CPUs, "
            f"Python {platform.python_version()}, {when}"
        )
        print("streams  requests  modelled_tok/s  received_chunks/s  received_tok/s  max_lag_ms")
        for level in (int(x) for x in args.levels.split(",")):
            row = asyncio.run(_level(url, level, args.seconds))
            print(
                f"{row['streams']:7d}  {row['requests']:8.0f}  {row['modelled_tok_s']:14.0f}  "
                f"{row['received_chunks_s']:17.0f}  {row['received_tok_s']:14.0f}  "
                f"{row['max_lag_ms']:10.1f}"
                + (f"  failures={row['failures']}" if row["failures"] else "")
            )
    finally:
        stop_ev.set()
        proc.join(timeout=10)
        if proc.is_alive():
            proc.terminate()


if __name__ == "__main__":
    main()
