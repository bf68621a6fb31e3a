"""Load-generator scale benchmark (issue 19, point 6): 10,000 streams in one process,
the share of an offered 51,200 tok/s with ``--workers 1`` and ``2``, and memory over a
steady run.

    PYTHONPATH=. .venv/bin/python -m benchmarks.loadgen_scale_bench \\
        [--parts streams,offered,memory] [--memory-s 600] [--before-tree DIR]

Every client is the real command (``python -m control.bench``) in a process of its own,
measured from outside: CPU = user+sys of its process tree (workers included), RSS
sampled every 0.2 s with psutil (the tree's sum).  The server is
``benchmarks/step_server.py`` in its own process: every 5 ms one one-token chunk to every
open stream, as a batching engine's decode step, cheap enough that what the client does
not receive is the client's limit (its late steps are reported).

1. streams: ``--concurrency 10000`` against 1 s steps and 40-token answers (40 s each); peak open
   streams from the records (send to last chunk), failures, client peak RSS.
2. offered: 256 streams × 200 tok/s = 51,200 tok/s offered, a 20 s level of 200-token
   answers; achieved = tokens the client received (from the records: first token plus
   every gap) between 2 s after the first send and the level's end, over that window;
   CPU per 1k tokens = client CPU over every token received.  ``--before-tree`` runs the
   same client from another checkout (e.g. ``git archive`` of the commit before) side by
   side in the same run.
3. memory: the offered load for ``--memory-s`` seconds with ``--save`` (records streamed
   to the store); RSS after the first 30 s, at the end and its peak.

Prints a Markdown block for docs/benchmarks.md with machine, date and load.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from loadgen.sinks import read_jsonl

ROOT = Path(__file__).parents[1]
OFFERED_STREAMS = 256
STEP_MS = 5.0
OFFERED_TOK_S = OFFERED_STREAMS * 1000.0 / STEP_MS
OFFERED_LEVEL_S = 20.0
OFFERED_ANSWER_TOKENS = 200
SETTLE_S = 2.0
MEMORY_SETTLE_S = 30.0


class StepServer:
    """benchmarks/step_server.py in a process of its own."""

    def __init__(self, step_ms: float) -> None:
        cmd = [sys.executable, "-m", "benchmarks.step_server", "--port", "0"]
        cmd += ["--step-ms", str(step_ms)]
        root = Path(__file__).resolve().parents[1]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, cwd=root)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line.startswith("PORT "):
            self.stop()
            raise RuntimeError(f"step server did not start: {line!r}")
        self.url = f"http://127.0.0.1:{int(line.split()[1])}"

    def stats(self) -> dict[str, float]:
        with urllib.request.urlopen(self.url + "/_stats", timeout=30) as resp:
            data: dict[str, float] = json.load(resp)
        return data

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@dataclass
class Client:
    """One ``infer-top bench`` process: its CPU and RSS as seen from outside."""

    cpu_s: float = 0.0
    rss: list[tuple[float, int]] = field(default_factory=list)
    """(seconds since start, RSS bytes of the process tree)."""
    code: int = 0
    stderr: str = ""

    @property
    def peak_rss(self) -> int:
        return max((r for _, r in self.rss), default=0)


def run_client(tree: Path, argv: list[str], timeout_s: float) -> Client:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(tree), *filter(None, [os.environ.get("BENCH_EXTRA_PATH")])])}  # fmt: skip
    cmd = [sys.executable, "-m", "control.bench", "--quiet", *argv]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = psutil.Popen(cmd, cwd=tree, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    client = Client()
    t0 = time.monotonic()

    def sample() -> None:
        while proc.poll() is None:
            try:
                tree_procs = [proc, *proc.children(recursive=True)]
                total = 0
                for p in tree_procs:
                    total += p.memory_info().rss
                client.rss.append((time.monotonic() - t0, total))
            except psutil.Error:
                pass
            time.sleep(0.2)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    _, err = proc.communicate(timeout=timeout_s)
    sampler.join()
    # user+sys of the whole tree: the client's own and its workers' (it waited for them)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    client.cpu_s = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    client.code, client.stderr = proc.returncode, err.decode()[-800:]
    return client


def peak_open(jsonl: Path) -> tuple[int, int, int, str]:
    """Peak open streams (send to last chunk), completed and failed requests, the most
    common failure."""
    records, _ = read_jsonl(jsonl)
    errors = Counter(f"{r.error_kind}: {r.error_message}" for r in records if not r.ok)
    ended = [r for r in records if r.end_at is not None]
    edges = sorted([(r.sent_at, 1) for r in ended] + [(r.end_at or 0.0, -1) for r in ended])
    open_now = peak = 0
    for _, step in edges:
        open_now += step
        peak = max(peak, open_now)
    done = sum(r.ok and not r.incomplete for r in records)
    top = "; ".join(f"{n} × {e}" for e, n in errors.most_common(2))
    return peak, done, sum(not r.ok for r in records), top


def streams(count: int, work: Path) -> dict[str, Any]:
    server = StepServer(1000.0)
    jsonl = work / "streams.jsonl"
    try:
        client = run_client(ROOT, ["--url", server.url, "--model", "m",
                                   "--concurrency", str(count), "--requests", str(count),
                                   "--input-len", "8", "--output-len", "40",
                                   "--timeout", "300", "--jsonl", str(jsonl)], 900)  # fmt: skip
    finally:
        server.stop()
    peak, done, failed, top = peak_open(jsonl)
    return {"count": count, "peak": peak, "completed": done, "failed": failed, "errors": top,
            "rss_mib": client.peak_rss / 2**20, "cpu_s": client.cpu_s, "code": client.code,
            "stderr": client.stderr if client.code else ""}  # fmt: skip


def received_in(jsonl: Path) -> tuple[float, int]:
    """Tokens received per second in the steady window, and tokens received in all."""
    records, _ = read_jsonl(jsonl)
    begin = min(r.sent_at for r in records) + SETTLE_S
    end = begin - SETTLE_S + OFFERED_LEVEL_S
    within = total = 0
    for r in records:
        if r.first_token_at is None:
            continue
        at = r.first_token_at
        arrivals = [at]
        for gap in r.itl_s:
            at += gap
            arrivals.append(at)
        total += len(arrivals)
        within += sum(begin <= a < end for a in arrivals)
    return within / (end - begin), total


def offered(tree: Path, workers: int, work: Path) -> dict[str, Any]:
    server = StepServer(STEP_MS)
    jsonl = work / f"offered-{tree.name}-{workers}.jsonl"
    argv = ["--url", server.url, "--model", "m", "--concurrency", str(OFFERED_STREAMS),
            "--duration", f"{OFFERED_LEVEL_S:g}s", "--input-len", "8",
            "--output-len", str(OFFERED_ANSWER_TOKENS), "--jsonl", str(jsonl)]  # fmt: skip
    if workers > 1:
        argv += ["--workers", str(workers)]
    try:
        client = run_client(tree, argv, 600)
        stats = server.stats()
    finally:
        server.stop()
    rate, tokens = received_in(jsonl)
    return {"tree": str(tree), "workers": workers, "tok_s": rate, "share": rate / OFFERED_TOK_S,
            "cpu_per_1k": client.cpu_s / max(tokens, 1) * 1000, "tokens": tokens,
            "cpu_s": client.cpu_s, "late_steps": stats["late_steps"], "steps": stats["steps"],
            "server_cpu_s": stats["cpu_s"], "server_chunks": stats["chunks"],
            "wall_s": client.rss[-1][0] if client.rss else 0.0,
            "load": os.getloadavg()[0], "code": client.code,
            "stderr": client.stderr if client.code else ""}  # fmt: skip


def memory(seconds: float, work: Path) -> dict[str, Any]:
    server = StepServer(STEP_MS)
    argv = ["--url", server.url, "--model", "m", "--concurrency", str(OFFERED_STREAMS),
            "--duration", f"{seconds:g}s", "--input-len", "8",
            "--output-len", str(OFFERED_ANSWER_TOKENS), "--save", "--db",
            str(work / "memory.db")]  # fmt: skip
    try:
        client = run_client(ROOT, argv, seconds + 300)
    finally:
        server.stop()
    settled = [r for t, r in client.rss if t >= MEMORY_SETTLE_S]
    start = settled[0] if settled else 0
    return {"seconds": seconds, "rss_settled_mib": start / 2**20,
            "rss_end_mib": (settled[-1] if settled else 0) / 2**20,
            "growth_mib": (max(settled, default=0) - start) / 2**20,
            "cpu_s": client.cpu_s, "code": client.code,
            "stderr": client.stderr if client.code else ""}  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--parts", default="streams,offered,memory")
    ap.add_argument("--streams", type=int, default=10_000)
    ap.add_argument("--memory-s", type=float, default=600.0)
    ap.add_argument("--before-tree", type=Path, default=None,
                    help="another checkout whose client runs the offered part too")  # fmt: skip
    args = ap.parse_args()
    parts = set(args.parts.split(","))
    load0 = os.getloadavg()[0]
    started = dt.datetime.now(dt.UTC)
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        if "streams" in parts:
            print(f"{args.streams} streams ...", file=sys.stderr)
            out["streams"] = streams(args.streams, work)
        if "offered" in parts:
            trees = [ROOT] + ([args.before_tree] if args.before_tree else [])
            out["offered"] = []
            for tree in trees:
                for workers in (1, 2) if tree == ROOT else (1,):
                    print(f"offered 51,200 tok/s, {tree.name}, {workers} worker(s) ...",
                          file=sys.stderr)  # fmt: skip
                    out["offered"].append(offered(tree, workers, work))
        if "memory" in parts:
            print(f"memory over {args.memory_s:g} s ...", file=sys.stderr)
            out["memory"] = memory(args.memory_s, work)
    report(out, started, load0)
    return 0


def report(out: dict[str, Any], started: dt.datetime, load0: float) -> None:
    load = os.getloadavg()
    print(f"\nMachine: {platform.node()} ({os.cpu_count()} cores, Python "
          f"{platform.python_version()}, uvloop {_uvloop()}), {started:%Y-%m-%d %H:%M} UTC; "
          f"load avg {load0:.1f} at the start, {load[0]:.1f} at the end\n")  # fmt: skip
    if "streams" in out:
        s = out["streams"]
        print(f"Streams: peak **{s['peak']:,}** open streams in one process (of {s['count']:,}), "
              f"{s['completed']:,} completed, {s['failed']:,} failed {s['errors']}, client "
              f"peak RSS {s['rss_mib']:.0f} MiB, CPU {s['cpu_s']:.1f} s. "
              f"{s['stderr']}\n")  # fmt: skip
    if "offered" in out:
        print("| client | workers | load avg | received tok/s | share of 51,200 | "
              "CPU s / 1k tok | client CPU | server CPU | server sent tok/s | "
              "server steps > 5 ms late |")  # fmt: skip
        print("|---|---|---|---|---|---|---|---|---|---|")
        for o in out["offered"]:
            wall = max(o["wall_s"], 1e-9)
            print(f"| {Path(o['tree']).name} | {o['workers']} | {o['load']:.1f} | "
                  f"{o['tok_s']:,.0f} | {o['share']:.0%} | {o['cpu_per_1k']:.4f} | "
                  f"{o['cpu_s'] / wall:.0%} of a core | {o['server_cpu_s'] / wall:.0%} | "
                  f"{o['server_chunks'] / (o['steps'] * STEP_MS / 1000):,.0f} | "
                  f"{o['late_steps']:.0f} of {o['steps']:.0f} |")  # fmt: skip
        for o in out["offered"]:
            if o["stderr"]:
                print(f"\n{Path(o['tree']).name} x{o['workers']} exited {o['code']}: {o['stderr']}")
        print()
    if "memory" in out:
        m = out["memory"]
        print(f"Memory over {m['seconds']:g} s at the offered load (records to the store): "
              f"RSS {m['rss_settled_mib']:.0f} MiB after {MEMORY_SETTLE_S:g} s, "
              f"{m['rss_end_mib']:.0f} MiB at the end, growth (peak − settled) "
              f"**{m['growth_mib']:.1f} MiB**. {m['stderr']}")  # fmt: skip


def _uvloop() -> str:
    try:
        import uvloop
    except ImportError:
        return "not installed"
    return str(uvloop.__version__)


if __name__ == "__main__":
    sys.exit(main())
