"""How many concurrent streams and chunks/s one simulator process serves here.

The simulator runs in its own process (as ``infer-top sim`` would); this process
is the client: N concurrent streaming chat requests, closed loop, for a fixed
window per level.  For each level it prints what the timing model asked for
(tokens/s of the server's ground truth, in real seconds), what the client
received, and how far the engine loop fell behind its schedule (max lag).
Where "received" falls short of "modelled", the machine, not the model, is the
limit.

``--truth-runs N`` measures instead how far a client's timings trail the ground
truth in the setting of ``tests/sim/test_server.py`` (8 clients, 4 sequences,
time scale 10, simulator and client on one event loop): the figures that test's
bounds must stay clear of.

Run: ``.venv/bin/python -m benchmarks.sim_bench [--seconds 6] [--levels 16,64,256,512]``
or ``.venv/bin/python -m benchmarks.sim_bench --truth-runs 5``
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


async def _truth_run() -> tuple[list[float], list[float]]:
    """Client TTFT - true TTFT per request, and measured - scheduled per token (s)."""
    from sim import load_profile, start_sim

    profile = load_profile(PROFILE).with_overrides(max_num_seqs=4, prefix_caching=False)
    sim = await start_sim(profile, host="127.0.0.1", port=0, time_scale=10.0)
    body = {
        "messages": [{"role": "user", "content": "Hello there"}],
        "max_tokens": 12,
        "ignore_eos": True,
        "stream": True,
    }

    async def one(s: aiohttp.ClientSession) -> tuple[str, float, list[float]]:
        sent, times, rid = time.time(), [], ""
        async with s.post(sim.url + "/v1/chat/completions", json=body) as r:
            async for line in r.content:
                if line.startswith(b"data: {"):
                    chunk = json.loads(line[6:])
                    rid = chunk["id"]
                    if chunk["choices"] and chunk["choices"][0]["delta"].get("content"):
                        times.append(time.time())
        return rid, sent, times

    try:
        async with aiohttp.ClientSession() as s:
            seen = await asyncio.gather(*(one(s) for _ in range(8)))
        truth = {t.request_id: t for t in sim.ground_truth(clock="epoch")}
    finally:
        await sim.stop()
    ttft, lag = [], []
    for rid, sent, times in seen:
        true = truth[rid]
        ttft.append(times[0] - sent - ((true.first_token_s or 0.0) - true.arrival_s))
        lag.extend(m - s for m, s in zip(times, true.token_times_s, strict=True))
    return ttft, lag


def _truth(runs: int) -> None:
    print(f"# sim_bench --truth-runs: {PROFILE}, max_num_seqs 4, 8 clients, time_scale 10")
    print(f"# load average {os.getloadavg()[0]:.1f}, {os.cpu_count()} CPUs")
    print("run  ttft_err_min_ms  ttft_err_max_ms  token_lag_min_ms  token_lag_max_ms")
    for run in range(1, runs + 1):
        ttft, lag = asyncio.run(_truth_run())
        print(
            f"{run:3d}  {min(ttft) * 1e3:15.1f}  {max(ttft) * 1e3:15.1f}  "
            f"{min(lag) * 1e3:16.2f}  {max(lag) * 1e3:16.1f}"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=6.0)
    ap.add_argument("--levels", default="16,64,256,512")
    ap.add_argument("--time-scale", type=float, default=0.25, help="4x faster than the model")
    ap.add_argument("--truth-runs", type=int, default=0, help="client timing vs ground truth")
    args = ap.parse_args()
    if args.truth_runs:
        _truth(args.truth_runs)
        return
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
