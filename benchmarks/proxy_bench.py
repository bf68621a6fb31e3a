"""Agent proxy overhead: TTFT through ``/v1/engines/{id}/proxy`` vs straight to the engine.

    .venv/bin/python -m benchmarks.proxy_bench [--streams 1,64] [--requests 200,2048]
        [--rounds 4] [--before-tree DIR] [--pin]

The agent runs as its own process (``python -m agents.cli``, replayed GPU, 1 s telemetry)
and starts the engine with its process runtime: the native "llama-server" is the
known-schedule server (tests/loadgen/sched_server.py, its own process, closing a connection
after each streamed answer as llama-server does), so every request has a fixed, known
server-side TTFT (20-40 ms, planned per request index) and the proxy's share is not hidden
in engine noise.  The project's load generator (``run_load``, closed loop, engine kind
``llamacpp`` as the control plane would drive it) runs in this process, alternately straight
to the engine's URL (``direct``) and through ``<agent>/v1/engines/<id>/proxy/v1`` with the
agent's token (``proxied``, reusing its connections to the agent as the control plane
does), and the same sweep run by the agent next to the engine, its records streamed back
(``node-side``, ``control.noderuns.run_on_node``, the fleet's default), in ``--rounds``
interleaved passes per stream count (the order flips every round), so machine noise hits
every path alike.  ``--before-tree DIR`` (another checkout, e.g. ``git archive`` of the
commit before) runs a second agent from that tree, with its own engine of the same kind,
and adds its proxied path (``proxied (before)``) to the same passes: before and after side
by side under the same load.

Per stream count and path: TTFT p50 / p99 and ITL p50 over all measured requests, *added*
= that path - direct for each percentile, and the *overhead* = median of (measured TTFT -
the server's own TTFT for that request, from its ``/_truth`` log), which leaves out the
planned TTFT spread.  Agent CPU: user+system seconds of the agent process (node-side: with
its load worker) during each path's passes, per request and as % of a core (the direct
passes give its idle baseline: telemetry sampling, subtracted for the per-request figure).
Goal (issue 16): the proxy adds < 1 ms TTFT p50 at 64 streams.

``--pin``: the agents on the last CPU, this process (the load generator) and the engines on
the others, as on a node where the agent has a core to itself beside the engine: on a
2-core box unpinned, the three processes of the proxied path queue for the same two cores
and the figure is the scheduler's, not the proxy's.  The direct path runs under the same
split (client and engine on the same CPUs), so *added* is still what the agent's hop adds.
A node-side pass's load worker is the agent's child and runs on the agent's CPU.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import json
import os
import platform
import statistics
import sys
import tempfile
import time
import urllib.request
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from agents.client import AgentClient
from benchmarks.agent_bench import cpu_model, free_port
from control.noderuns import run_on_node
from loadgen import ClosedLoop, LoadSpec, MemorySink, Target, Workload, run_load
from loadgen.process import run_in_new_loop
from loadgen.stats import percentiles
from runs.events import RunEvent
from runs.records import RequestRecord

TOKEN = "bench-token-0123456789abcdef"
SCHED = Path(__file__).resolve().parent.parent / "tests" / "loadgen" / "sched_server.py"
SERVER_ARGS = "--ttft-ms 20 --ttft-spread-ms 20 --itl-ms 20 --close-after-stream"
WORKLOAD = Workload(input_len=24, output_len=8)
PATHS = ("direct", "proxied", "node-side")
"""direct and proxied: the load generator runs here, the control plane's side; node-side:
the agent runs it next to the engine and streams every record back (issue 16's default)."""
BEFORE = "proxied (before)"
"""The proxied path through the agent of ``--before-tree``."""
ROOT = Path(__file__).resolve().parent.parent


@dataclass
class PathResult:
    records: list[RequestRecord] = field(default_factory=list)
    overhead_s: list[float] = field(default_factory=list)
    sent: int = 0
    """Requests sent, warm-up included (the agent's CPU serves them all)."""
    agent_cpu_s: float = 0.0
    wall_s: float = 0.0


def _wrapper(tmp: Path) -> Path:
    """The agent's native llama-server: the schedule server on the port the agent chose."""
    wrapper = tmp / "llama-server"
    wrapper.write_text(
        "#!/bin/sh\n"
        'while [ $# -gt 0 ]; do [ "$1" = --port ] && port=$2; shift; done\n'
        f'exec "{sys.executable}" "{SCHED}" --port "$port" {SERVER_ARGS}\n'
    )
    wrapper.chmod(0o755)
    return wrapper


def _truth(engine_url: str) -> dict[str, Any]:
    with urllib.request.urlopen(engine_url + "/_truth", timeout=60) as resp:
        data: dict[str, Any] = json.load(resp)["requests"]
    return data


class _Records:
    """The node-side run's records as they arrive here (what the control plane stores)."""

    def __init__(self) -> None:
        self.records: list[RequestRecord] = []

    def on_event(self, event: RunEvent, /) -> None:
        if isinstance(event, RequestRecord):
            self.records.append(event)


def _cpu_s(proc: psutil.Process) -> float:
    """User + system time of the agent and of its finished children (node-side workers)."""
    t = proc.cpu_times()
    return float(t.user + t.system + t.children_user + t.children_system)


async def _workers_reaped(proc: psutil.Process, timeout_s: float = 30.0) -> None:
    """A child's time joins the agent's once the agent has reaped it: wait for that, so a
    node-side pass's worker is not billed to the pass after it."""
    for _ in range(int(timeout_s / 0.05)):  # polled: a process's exit posts no event here
        if not proc.children():
            return
        await asyncio.sleep(0.05)


async def _pass(
    path: str,
    target: Target,
    streams: int,
    requests: int,
    run_id: str,
    agent: psutil.Process,
    node: tuple[AgentClient, str],
) -> tuple[list[RequestRecord], int, float, float]:
    spec = LoadSpec((ClosedLoop(streams),), requests_per_level=requests, warmup_requests=streams)
    cpu0, t0 = _cpu_s(agent), time.perf_counter()
    if path == "node-side":
        client, engine_id = node
        got = _Records()
        run = run_on_node(client, engine_id, spec, WORKLOAD, got, model=target.model)
        async for _event in run:
            pass
        await _workers_reaped(agent)
        records = got.records
    else:
        sink = MemorySink()
        await run_load(spec, WORKLOAD, target, sink, run_id=run_id)
        records = sink.records
    cpu, wall = _cpu_s(agent) - cpu0, time.perf_counter() - t0
    return [r for r in records if not r.warmup], len(records), cpu, wall


@dataclass
class Node:
    """One agent process with its engine started."""

    client: AgentClient
    url: str
    proc: psutil.Process
    engine_id: str
    engine_url: str


@dataclass(frozen=True)
class Pinning:
    """Which CPUs the agents get and which the rest (client, engines) keep."""

    agent_cpus: set[int]
    other_cpus: set[int]

    @classmethod
    def split(cls) -> Pinning:
        cpus = os.sched_getaffinity(0)
        last = max(cpus)
        return cls({last}, (cpus - {last}) or {last})


@contextlib.asynccontextmanager
async def _node(tree: Path, tmp: Path, pin: Pinning | None) -> AsyncIterator[Node]:
    """An agent run from ``tree`` (its own code on ``PYTHONPATH``) with the schedule server
    started as its native llama-server."""
    port = free_port()
    (tmp / "token").write_text(TOKEN)
    (tmp / "token").chmod(0o600)
    (tmp / "models").mkdir()
    (tmp / "models" / "model.gguf").touch()
    env = {**os.environ, "PYTHONPATH": str(tree)}
    agent = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "agents.cli", "--listen", f"127.0.0.1:{port}",
        "--token-file", str(tmp / "token"), "--replay-trace", "--interval", "1s",
        "--state-dir", str(tmp / "state"), "--node-name", "bench",
        "--native", f"llamacpp={_wrapper(tmp)}", "--model-dir", str(tmp / "models"),
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL, cwd=tree, env=env,
    )  # fmt: skip
    agent_url = f"http://127.0.0.1:{port}"
    try:
        async with AgentClient(agent_url, TOKEN) as client:
            deadline = time.monotonic() + 30
            while True:
                try:
                    await client.node_info()
                    break
                except Exception:
                    if time.monotonic() > deadline:
                        raise
                    await asyncio.sleep(0.1)
            launch = {"model": str(tmp / "models" / "model.gguf"), "max_num_seqs": 64}
            engine = await client.start("llamacpp", launch, runtime="process")
            try:
                if engine.url is None or engine.health != "healthy":
                    raise RuntimeError(f"engine did not start: {engine.message}")
                if pin is not None:
                    proc = psutil.Process(agent.pid)
                    proc.cpu_affinity(sorted(pin.agent_cpus))
                    for engine_proc in proc.children(recursive=True):  # started before the pin
                        engine_proc.cpu_affinity(sorted(pin.other_cpus))
                yield Node(client, agent_url, psutil.Process(agent.pid), engine.id, engine.url)
            finally:
                await client.stop(engine.id)
    finally:
        agent.terminate()
        await agent.wait()


def _proxied(node: Node) -> Target:
    return Target(
        f"{node.url}/v1/engines/{node.engine_id}/proxy/v1",
        "sched",
        engine_kind="llamacpp",
        api_key=TOKEN,
        through_proxy=True,  # as control.reach aims the control plane
    )


async def measure(
    stream_counts: list[int],
    requests: list[int],
    rounds: int,
    before_tree: Path | None,
    pin: Pinning | None = None,
) -> tuple[dict[tuple[int, str], PathResult], str]:
    paths = (*PATHS, BEFORE) if before_tree else PATHS
    results = {(s, p): PathResult() for s in stream_counts for p in paths}
    truth: dict[str, Any] = {}
    tmp = tempfile.TemporaryDirectory()
    async with contextlib.AsyncExitStack() as stack:
        stack.callback(tmp.cleanup)
        tmp_name = tmp.name
        (Path(tmp_name) / "now").mkdir()
        node = await stack.enter_async_context(_node(ROOT, Path(tmp_name) / "now", pin))
        nodes = {p: node for p in PATHS}
        targets = {"direct": Target(node.engine_url, "sched", engine_kind="llamacpp"),
                   "proxied": _proxied(node)}  # fmt: skip
        targets["node-side"] = targets["direct"]  # the agent's worker aims there
        if before_tree:
            (Path(tmp_name) / "before").mkdir()
            nodes[BEFORE] = await stack.enter_async_context(
                _node(before_tree, Path(tmp_name) / "before", pin)
            )
            targets[BEFORE] = _proxied(nodes[BEFORE])
        for streams, total in zip(stream_counts, requests, strict=True):
            per_pass = max(total // rounds, 1)
            for r in range(rounds):
                order = paths if r % 2 == 0 else paths[::-1]
                for path in order:
                    print(f"{streams} streams, round {r + 1}, {path} ...", file=sys.stderr)
                    run_id = f"{path[0]}{path[-2]}{streams}r{r}"
                    at = nodes[path]
                    recs, sent, cpu, wall = await _pass(
                        path, targets[path], streams, per_pass, run_id, at.proc,
                        (at.client, at.engine_id),
                    )  # fmt: skip
                    res = results[(streams, path)]
                    res.records += recs
                    res.sent += sent
                    res.agent_cpu_s += cpu
                    res.wall_s += wall
        for engine_url in {n.engine_url for n in nodes.values()}:
            truth |= await asyncio.to_thread(_truth, engine_url)
    for res in results.values():
        for rec in res.records:
            entry = truth.get(f"{rec.run_id}-{rec.level_index}-{rec.request_index}")
            if rec.ttft_s is not None and entry and entry["chunks"]:
                res.overhead_s.append(rec.ttft_s - (entry["chunks"][0] - entry["recv"]))
    return results, f"{os.getloadavg()[0]:.1f}"


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value * 1e3:.2f}"


def report(results: dict[tuple[int, str], PathResult], stream_counts: list[int]) -> None:
    paths = [p for p in (*PATHS, BEFORE) if (stream_counts[0], p) in results]
    print("| streams | path | requests (failed) | TTFT p50 ms | TTFT p99 ms | ITL p50 ms | "
          "added p50 ms | added p99 ms | overhead vs server median ms | agent CPU |")  # fmt: skip
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for streams in stream_counts:
        base = None
        for path in paths:
            res = results[(streams, path)]
            ok = [r for r in res.records if r.ttft_s is not None and r.error_kind is None]
            ttft = percentiles(r.ttft_s for r in ok if r.ttft_s is not None)
            itl = percentiles(gap for r in ok for gap in r.itl_s)
            failed = len(res.records) - len(ok)
            if base is None:
                base = ttft
                added = "", ""
            else:
                added = tuple(  # type: ignore[assignment]
                    f"{(a - b) * 1e3:+.2f}" if a is not None and b is not None else "n/a"
                    for a, b in ((ttft.p50, base.p50), (ttft.p99, base.p99))
                )
            over = statistics.median(res.overhead_s) if res.overhead_s else None
            cpu_pct = 100 * res.agent_cpu_s / res.wall_s if res.wall_s else 0.0
            cpu = f"{cpu_pct:.1f} % of a core"
            if path != "direct" and res.sent:
                # the before agent idles as the other does: its idle cost is the same
                direct = results[(streams, "direct")]
                idle_cpu_s = direct.agent_cpu_s / direct.wall_s * res.wall_s if direct.wall_s else 0
                per_request = (res.agent_cpu_s - idle_cpu_s) / res.sent
                cpu += f", {per_request * 1e6:.0f} µs/request above idle"
            print(f"| {streams} | {path} | {len(res.records)} ({failed}) | {_ms(ttft.p50)} | "
                  f"{_ms(ttft.p99)} | {_ms(itl.p50)} | {added[0]} | {added[1]} | "
                  f"{_ms(over)} | {cpu} |")  # fmt: skip


def _ints(value: str) -> list[int]:
    return [int(v) for v in value.split(",")]


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=f"engine: sched_server.py {SERVER_ARGS}; workload: "
        f"{WORKLOAD.input_len}-token prompts, {WORKLOAD.output_len}-token answers",
    )
    ap.add_argument("--streams", type=_ints, default=[1, 64], help="comma list (default 1,64)")
    ap.add_argument("--requests", type=_ints, default=[200, 2048],
                    help="measured requests per path for each --streams entry, split over the "
                    "rounds (default 200,2048)")  # fmt: skip
    ap.add_argument("--rounds", type=int, default=4, help="interleaved passes per path")
    ap.add_argument("--before-tree", type=lambda v: Path(v).resolve(), default=None,
                    help="another checkout: its agent's proxy runs in the same passes")  # fmt: skip
    ap.add_argument("--pin", action="store_true",
                    help="the agents on the last CPU, client and engines on the others (see "
                    "the module's help)")  # fmt: skip
    args = ap.parse_args()
    if len(args.requests) != len(args.streams):
        ap.error("--requests needs one count per --streams entry")
    pin = Pinning.split() if args.pin else None
    if pin is not None:
        os.sched_setaffinity(0, pin.other_cpus)
    load0 = os.getloadavg()
    t0 = dt.datetime.now(dt.UTC)
    results, load1 = run_in_new_loop(
        measure(args.streams, args.requests, args.rounds, args.before_tree, pin)
    )
    print(f"\nMachine: {platform.machine()} {cpu_model()}, {os.cpu_count()} CPUs, Python "
          f"{platform.python_version()}; load average {load0[0]:.1f} / {load0[1]:.1f} / "
          f"{load0[2]:.1f} at the start, {load1} at the end; {t0:%Y-%m-%d %H:%M} UTC, "
          f"{(dt.datetime.now(dt.UTC) - t0).total_seconds():.0f} s"
          + (f"; agents pinned to CPU {sorted(pin.agent_cpus)}, client and engines to "
             f"{sorted(pin.other_cpus)}" if pin else "") + "\n")  # fmt: skip
    report(results, args.streams)
    return 0


if __name__ == "__main__":
    sys.exit(main())
