"""Load-generator benchmark: accuracy, 2,000 streams, CPU per token vs GuideLLM.

    .venv/bin/python -m benchmarks.loadgen_bench [--streams 2000] [--guidellm PATH]

1. Accuracy: 256 concurrent streams against the known-schedule server
   (tests/loadgen/sched_server.py, its own process); TTFT p50 / p99 measured
   vs the server's own stamps (goal: within 0.5 ms / 2 ms, on a quiet machine).
   These are the precision figures; tests/loadgen/test_accuracy.py only catches
   mistakes (100 ms and more, or a TTFT before the server sent), with bounds
   that scheduling noise cannot reach.  ``--accuracy-streams 32`` runs its
   workload, so its margin over the noise can be measured on a busy machine.
2. Capacity: one client process holds ``--streams`` concurrent streams
   (peak open streams from the records; goal >= 2,000, no failures).
3. Client CPU per streamed token, side by side in the same run against the
   same server: ``infer-top bench`` vs GuideLLM (``guidellm run`` from a
   separate venv, default /tmp/guidellm-venv).  Each client runs twice (64 and
   1,024 requests); the marginal CPU (user+sys of the client process tree) per
   token the server sent is compared, so start-up costs cancel.  Goal: at most
   half of GuideLLM's.

Prints a Markdown block for docs/benchmarks.md with machine and date.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from loadgen import ClosedLoop, LoadSpec, MemorySink, Target, Workload, run_load
from loadgen.process import run_in_new_loop
from loadgen.stats import percentiles
from loadgen.workload import PromptSource
from tests.loadgen.sched_server import SchedServer

CPU_STREAMS = 64
CPU_SIZES = (64, 1024)
CPU_OUT_TOKENS = 64


def _sent_chunks(server: SchedServer) -> int:
    return sum(len(e["chunks"]) for e in server.truth()["requests"].values())


Accuracy = tuple[float, float, float, float, float, float, float]


def accuracy(runs: int, streams: int) -> list[Accuracy]:
    """Per run: p50 and p99 diff ms, truth p50 and p99 ms, load avg, and the smallest
    and median per-request error ms (measured TTFT minus the server's truth)."""
    out = []
    for k in range(runs):
        server = SchedServer("--ttft-ms", "100", "--ttft-spread-ms", "200", "--itl-ms", "100")
        try:
            sink = MemorySink()
            spec = LoadSpec(
                (ClosedLoop(streams),), requests_per_level=2 * streams, warmup_requests=streams
            )
            run_in_new_loop(
                run_load(
                    spec,
                    Workload(input_len=24, output_len=8),
                    Target(server.url, "m"),
                    sink,
                    run_id=f"a{k}",
                )
            )
            truth = server.truth()["requests"]
        finally:
            server.stop()
        pairs = []
        for r in sink.records:
            if r.warmup or r.ttft_s is None:
                continue
            e = truth[f"a{k}-0-{r.request_index}"]
            pairs.append((r.ttft_s, e["chunks"][0] - e["recv"]))
        got, want = percentiles(m for m, _ in pairs), percentiles(t for _, t in pairs)
        assert got.p50 and want.p50 and got.p99 and want.p99
        d50, d99 = (got.p50 - want.p50) * 1e3, (got.p99 - want.p99) * 1e3
        errors = sorted(m - t for m, t in pairs)
        least, median = errors[0] * 1e3, statistics.median(errors) * 1e3
        out.append((d50, d99, want.p50 * 1e3, want.p99 * 1e3, os.getloadavg()[0], least, median))
    return out


def capacity(streams: int) -> dict[str, float]:
    server = SchedServer("--ttft-ms", "1500", "--ttft-spread-ms", "1000", "--itl-ms", "500")
    try:
        sink = MemorySink()
        spec = LoadSpec((ClosedLoop(streams),), requests_per_level=2 * streams,
                        request_timeout_s=120, stall_timeout_s=60)  # fmt: skip
        cpu0, t0 = time.process_time(), time.perf_counter()
        result = run_in_new_loop(
            run_load(spec, Workload(input_len=16, output_len=8), Target(server.url, "m"), sink)
        )
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - t0
    finally:
        server.stop()
    edges = sorted([(r.sent_at, 1) for r in sink.records if r.end_at]
                   + [(r.end_at, -1) for r in sink.records if r.end_at])  # fmt: skip
    open_now = peak = 0
    for _, step in edges:
        open_now += step
        peak = max(peak, open_now)
    level = result.levels[0]
    return {
        "peak": peak, "completed": level.completed, "failed": level.failed,
        "cpu_s": cpu, "wall_s": wall, "tokens": level.total_output_tokens,
        "ttft_p50_ms": (level.ttft_s.p50 or 0) * 1e3,
    }  # fmt: skip


def _child_cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def _measure(server: SchedServer, cmd: list[str], env: dict[str, str]) -> tuple[float, int, str]:
    """CPU seconds of the client process tree and chunks the server sent it."""
    before_chunks, before_cpu = _sent_chunks(server), _child_cpu_s()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env)
    cpu = _child_cpu_s() - before_cpu
    tail = (proc.stdout + proc.stderr)[-600:] if proc.returncode else ""
    return cpu, _sent_chunks(server) - before_chunks, tail


def cpu_per_token(guidellm: Path | None, work: Path) -> dict[str, object]:
    server = SchedServer("--ttft-ms", "20", "--ttft-spread-ms", "10", "--itl-ms", "10")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    src = PromptSource(Workload(input_len=32, output_len=CPU_OUT_TOKENS))
    data = work / "prompts.json"
    data.write_text(json.dumps([
        {"prompt": src.item(i).prompt, "prompt_tokens_count": 32,
         "output_tokens_count": CPU_OUT_TOKENS} for i in range(max(CPU_SIZES))
    ]))  # fmt: skip

    def ours(n: int) -> list[str]:
        return [sys.executable, "-m", "control.bench", "--url", server.url, "--model", "m",
                "--engine", "vllm", "--concurrency", str(CPU_STREAMS), "--requests", str(n),
                "--input-len", "32", "--output-len", str(CPU_OUT_TOKENS), "--quiet"]  # fmt: skip

    def theirs(n: int) -> list[str]:
        assert guidellm is not None
        return [str(guidellm), "run", "--backend", f"kind=openai_http,target={server.url},model=m",
                "--profile", f"kind=concurrent,streams={CPU_STREAMS}",
                "--constraint", f"kind=max_requests,count={n}",
                "--data", f"kind=json_file,path={data}",
                "--output", f"kind=json,path={work / f'guidellm-{n}.json'}",
                "--disable-console-interactive"]  # fmt: skip

    clients: dict[str, Callable[[int], list[str]]] = {"infer-top": ours}
    notes: list[str] = []
    if guidellm is not None and guidellm.exists():
        clients["guidellm 0.8.1"] = theirs
    else:
        notes.append(f"GuideLLM not found at {guidellm}: pip install guidellm==0.8.1 into a venv")
    rows: dict[str, dict[str, float]] = {}
    try:
        for name, build in clients.items():
            points = []
            for n in CPU_SIZES:
                cpu, tokens, err = _measure(server, build(n), env)
                if err:
                    notes.append(f"{name} with {n} requests failed: {err}")
                points.append((cpu, tokens))
            (c0, k0), (c1, k1) = points
            rows[name] = {"cpu_small": c0, "tok_small": k0, "cpu_big": c1, "tok_big": k1,
                          "us_per_tok": (c1 - c0) / max(k1 - k0, 1) * 1e6,
                          "us_per_tok_total": c1 / max(k1, 1) * 1e6}  # fmt: skip
    finally:
        server.stop()
    return {"rows": rows, "notes": notes}


def report_accuracy(acc: list[Accuracy], streams: int) -> None:
    print(f"| run ({streams} streams) | load avg | truth p50 / p99 ms | TTFT p50 err ms | "
          "TTFT p99 err ms | request err min / median ms |")  # fmt: skip
    print("|---|---|---|---|---|---|")
    for i, (d50, d99, t50, t99, load, least, median) in enumerate(acc):
        print(f"| {i + 1} | {load:.1f} | {t50:.1f} / {t99:.1f} | {d50:+.3f} | {d99:+.3f} | "
              f"{least:+.3f} / {median:+.3f} |")  # fmt: skip
    med50 = statistics.median(abs(a[0]) for a in acc)
    med99 = statistics.median(abs(a[1]) for a in acc)
    print(f"\nMedian over runs: p50 error {med50:.3f} ms (goal 0.5), p99 error {med99:.3f} ms "
          f"(goal 2).\n")  # fmt: skip


def report_capacity(cap: dict[str, float], streams: int) -> None:
    print(f"Capacity: peak {cap['peak']:.0f} open streams in one process (goal >= {streams}), "
          f"{cap['completed']:.0f} completed, {cap['failed']:.0f} failed, "
          f"{cap['tokens']:.0f} tokens in {cap['wall_s']:.1f} s, client CPU {cap['cpu_s']:.1f} s "
          f"({cap['cpu_s'] / max(cap['tokens'], 1) * 1e6:.0f} µs/token incl. request set-up), "
          f"TTFT p50 {cap['ttft_p50_ms']:.0f} ms vs 1,500-2,500 ms planned.\n")  # fmt: skip


def report_cpu(cpu: dict[str, object]) -> None:
    rows = cpu["rows"]
    assert isinstance(rows, dict)
    print(f"| client ({CPU_STREAMS} streams, {CPU_OUT_TOKENS} tok/answer) | CPU s @64 req | "
          "CPU s @1024 req | tokens @1024 | marginal µs/token | total µs/token |")  # fmt: skip
    print("|---|---|---|---|---|---|")
    for name, r in rows.items():
        print(f"| {name} | {r['cpu_small']:.2f} | {r['cpu_big']:.2f} | {r['tok_big']:.0f} | "
              f"{r['us_per_tok']:.1f} | {r['us_per_tok_total']:.1f} |")  # fmt: skip
    if len(rows) == 2:
        ours, theirs = (r["us_per_tok"] for r in rows.values())
        print(f"\ninfer-top uses {ours / theirs:.2f}x GuideLLM's CPU per token (goal <= 0.5).")
    for note in cpu["notes"]:  # type: ignore[attr-defined]
        print(f"\nNote: {note}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--parts", default="accuracy,capacity,cpu", help="comma list of parts")
    ap.add_argument("--streams", type=int, default=2000)
    ap.add_argument("--accuracy-runs", type=int, default=3)
    ap.add_argument("--accuracy-streams", type=int, default=256)
    ap.add_argument("--guidellm", type=Path, default=Path("/tmp/guidellm-venv/bin/guidellm"))
    args = ap.parse_args()
    parts = set(args.parts.split(","))
    acc = cap = cpu = None
    if "accuracy" in parts:
        print(f"accuracy at {args.accuracy_streams} streams ...", file=sys.stderr)
        acc = accuracy(args.accuracy_runs, args.accuracy_streams)
    if "capacity" in parts:
        print(f"capacity at {args.streams} streams ...", file=sys.stderr)
        cap = capacity(args.streams)
    if "cpu" in parts:
        print("CPU per token, infer-top vs GuideLLM ...", file=sys.stderr)
        with tempfile.TemporaryDirectory() as tmp:
            cpu = cpu_per_token(args.guidellm, Path(tmp))
    load = os.getloadavg()
    now = dt.datetime.now(dt.UTC)
    print(f"\nMachine: {platform.node()} ({os.cpu_count()} cores, {platform.python_version()}, "
          f"load avg {load[0]:.1f} at the end), {now:%Y-%m-%d %H:%M} UTC\n")  # fmt: skip
    if acc is not None:
        report_accuracy(acc, args.accuracy_streams)
    if cap is not None:
        report_capacity(cap, args.streams)
    if cpu is not None:
        report_cpu(cpu)
    return 0


if __name__ == "__main__":
    sys.exit(main())
