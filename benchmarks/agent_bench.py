"""Node agent cost: CPU per GPU at 1 Hz and frame latency from sample to client.

The agent runs as its own process (``python -m agents.cli``) replaying the H200
NVML recording as N GPUs, with M simulated engines it starts, health-gates and
scrapes every interval.  A client in this process follows the telemetry
WebSocket.  Reported:

* agent CPU: user+system seconds of the agent process over the window, as % of
  one core, total and per GPU (the simulators run inside the agent process, so
  their idle cost is included: an upper bound for the agent);
* frame latency: client receive time minus the frame's ``ts`` (taken when
  sampling starts), so it includes the NVML reads and engine scrapes.

Run: ``.venv/bin/python -m benchmarks.agent_bench [--gpus 8] [--engines 2] [--seconds 60]``
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import psutil

from agents.client import AgentClient

TOKEN = "bench-token-0123456789abcdef"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    rank = q * (len(ordered) - 1)
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


async def measure(client: AgentClient, proc: psutil.Process, seconds: float) -> dict[str, float]:
    latencies: list[float] = []
    cpu0 = proc.cpu_times()
    t0 = time.monotonic()
    engines_seen = 0
    first = True
    async for frame in client.stream():
        if first:  # the buffered latest frame is up to one interval old: not a latency
            first = False
            continue
        latencies.append(time.time() - frame.ts)
        engines_seen = max(engines_seen, len(frame.engines))
        if time.monotonic() - t0 >= seconds:
            break
    wall = time.monotonic() - t0
    cpu1 = proc.cpu_times()
    busy = (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)
    return {
        "cpu_pct": 100 * busy / wall,
        "frames": len(latencies),
        "engines": engines_seen,
        "lat_p50_ms": 1000 * statistics.median(latencies),
        "lat_p99_ms": 1000 * percentile(latencies, 0.99),
        "lat_max_ms": 1000 * max(latencies),
    }


async def run(gpus: int, engines: int, seconds: float, interval: str) -> None:
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        token_file = Path(tmp) / "token"
        token_file.write_text(TOKEN)
        token_file.chmod(0o600)
        agent = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "agents.cli", "--listen", f"127.0.0.1:{port}",
            "--token-file", str(token_file), "--replay-trace", "--replay-gpus", str(gpus),
            "--interval", interval, "--state-dir", str(Path(tmp) / "state"),
            "--node-name", "bench", stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
        )  # fmt: skip
        proc = psutil.Process(agent.pid)
        url = f"http://127.0.0.1:{port}"
        try:
            async with aiohttp.ClientSession() as http, AgentClient(url, TOKEN, http) as client:
                for _ in range(200):
                    try:
                        await client.node_info()
                        break
                    except Exception:
                        await asyncio.sleep(0.1)
                idle = await measure(client, proc, seconds)
                for _ in range(engines):
                    await client.start("sim", {"profile": "h100-llama2-7b-vllm"})
                await asyncio.sleep(2)
                busy = await measure(client, proc, seconds)
        finally:
            agent.terminate()
            await agent.wait()
    print(
        f"machine: {platform.machine()} {cpu_model()}, {os.cpu_count()} CPUs, "
        f"load avg {os.getloadavg()[0]:.1f}, Python {platform.python_version()}, "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
    )
    print(f"replayed GPUs: {gpus}, interval {interval}, window {seconds:.0f} s per row")
    print(
        "| engines | frames | agent CPU % of a core | per GPU % | latency p50 ms | p99 ms | "
        "max ms |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for row in (idle, busy):
        print(
            f"| {row['engines']:.0f} | {row['frames']:.0f} | {row['cpu_pct']:.2f} | "
            f"{row['cpu_pct'] / gpus:.3f} | {row['lat_p50_ms']:.1f} | "
            f"{row['lat_p99_ms']:.1f} | {row['lat_max_ms']:.1f} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--engines", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--interval", default="1s")
    args = parser.parse_args()
    asyncio.run(run(args.gpus, args.engines, args.seconds, args.interval))


if __name__ == "__main__":
    main()
