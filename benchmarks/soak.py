"""The soak: the agent and the TUI for 20 minutes with engines starting and stopping and
load running; do memory, descriptors, tasks and the store stay flat?

``python -m benchmarks.soak [--minutes 20] [--json out.json]``

* An agent process (the agent's own server, ``agents.embedded``, replayed H200 GPUs at
  1 Hz) on 127.0.0.1, in a process of its own so that its figures are its own.
* The TUI in this process, headless (Textual's Pilot), from a config file naming that
  agent, with its store (SQLite) in a scratch directory.
* Over and over: a simulated engine is started through the agent, the Load screen runs
  its ``smoke`` profile against it (2 levels x 4 requests, recorded with the node's
  telemetry), and the engine is stopped again.
* Every minute: the TUI process's and the agent process's resident memory (RSS), open
  file descriptors and asyncio tasks, and the store's size on disk (file + WAL).

The table printed at the end goes to docs/benchmarks.md; "flat" is judged from minute 2
(start-up done: imports, screens, first run) to the last minute.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import gc
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections import Counter
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SIM_PROFILE = "h100-llama2-7b-vllm"
NODE = "soak-node"
STATS_EVERY_S = 5.0
"""How often the agent process writes its own figures for the driver to read."""


def process_figures(pid: int | str = "self") -> dict[str, float]:
    """RSS (MiB; and of it anonymous memory and pages of mapped files) and open
    descriptors of a process, from /proc."""
    kib = {"VmRSS:": 0, "RssAnon:": 0, "RssFile:": 0}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name = line.split(maxsplit=1)[0] if line else ""
        if name in kib:
            kib[name] = int(line.split()[1])
    return {
        "rss_mib": kib["VmRSS:"] / 1024,
        "rss_anon_mib": kib["RssAnon:"] / 1024,
        "rss_file_mib": kib["RssFile:"] / 1024,
        "fds": len(os.listdir(f"/proc/{pid}/fd")),
    }


class _Mallinfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
                     "uordblks", "fordblks", "keepcost")
    ]  # fmt: skip


def _python_arenas_bytes() -> int:
    """The bytes Python's small-object allocator holds in its arenas (mapped apart from the
    C heap, so not in ``mallinfo2``): its own statistics, which it writes to stderr."""
    with tempfile.TemporaryFile() as out:
        saved = os.dup(2)
        try:
            os.dup2(out.fileno(), 2)
            sys._debugmallocstats()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        out.seek(0)
        text = out.read().decode(errors="replace")
    # "Total                                             =            9,437,184"
    match = re.search(r"^Total\s*=\s*([\d,]+)", text, re.MULTILINE)
    return int(match.group(1).replace(",", "")) if match else 0


def heap_figures() -> dict[str, float]:
    """Where this process's memory is, beyond RSS: Python's allocated blocks, SQLite's
    own allocations, and the C heap (glibc: in use, and free but still held). A growing
    RSS with these flat is the allocator's, not a leak's."""
    import _sqlite3

    lib = ctypes.CDLL(_sqlite3.__file__)
    sqlite_used = lib.sqlite3_memory_used
    sqlite_used.restype = ctypes.c_int64
    # SQLITE_STATUS_PAGECACHE_OVERFLOW (2): the page caches' bytes (from the heap here)
    cache_now, cache_high = ctypes.c_int64(), ctypes.c_int64()
    lib.sqlite3_status64(2, ctypes.byref(cache_now), ctypes.byref(cache_high), 0)
    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype = _Mallinfo2
    info = libc.mallinfo2()
    return {
        "py_blocks_k": sys.getallocatedblocks() / 1000,
        "py_arenas_mib": _python_arenas_bytes() / 2**20,
        "sqlite_mib": sqlite_used() / 2**20,
        "sqlite_cache_mib": cache_now.value / 2**20,
        "malloc_used_mib": (info.uordblks + info.hblkhd) / 2**20,
        "malloc_free_mib": info.fordblks / 2**20,
    }


def live_objects() -> Counter[str]:
    """This process's live objects after a full collection, counted by type: cheap enough
    for every soak, and a type that keeps growing names what is kept."""
    gc.collect()
    return Counter(f"{type(o).__module__}.{type(o).__qualname__}" for o in gc.get_objects())


def grown_types(before: Counter[str], top: int = 10) -> str:
    after = live_objects()
    after.subtract(before)
    return ", ".join(f"{name} {n:+d}" for name, n in after.most_common(top) if n > 0) or "none"


# -- the agent process -----------------------------------------------------------------


async def serve_agent(workdir: Path) -> None:
    from agents.embedded import embedded_agent, embedded_config

    cfg = embedded_config(
        platform="replay", replay_gpus=2, node_name=NODE, state_dir=workdir / "agent",
        adopt_on_start=False,
    )  # fmt: skip
    async with embedded_agent(cfg) as (url, token):
        token_file = workdir / "agent.token"
        token_file.write_text(token + "\n")
        token_file.chmod(0o600)
        (workdir / "config.toml").write_text(
            f'[[nodes]]\nname = "{NODE}"\nurl = "{url}"\ntoken_file = "{token_file}"\n'
        )
        stats = workdir / "agent-stats.json"
        baseline = None
        objects: Counter[str] | None = None
        while not (workdir / "STOP").exists():
            figures = process_figures() | {"tasks": len(asyncio.all_tasks())} | heap_figures()
            tmp = stats.with_suffix(".tmp")
            tmp.write_text(json.dumps(figures))
            tmp.replace(stats)  # the driver never reads half a file
            if objects is None and (workdir / "BASELINE").exists():
                objects = live_objects()
                if tracemalloc.is_tracing():
                    baseline = tracemalloc.take_snapshot()
            await asyncio.sleep(STATS_EVERY_S)
        if objects is not None:
            (workdir / "agent-types.txt").write_text(grown_types(objects))
        if baseline is not None:
            (workdir / "agent-growth.txt").write_text(grown_since(baseline))


def grown_since(baseline: tracemalloc.Snapshot, top: int = 12) -> str:
    """Where this process's traced memory grew since ``baseline``: the ``top`` call sites
    by bytes gained, each with the project's own frame nearest the allocation."""
    # only what the project's own code allocated, directly or through a library it
    # called: comparing every trace of two snapshots takes minutes on a small box
    ours = [tracemalloc.Filter(True, f"{ROOT}/*", all_frames=True)]
    now = tracemalloc.take_snapshot().filter_traces(ours)
    stats = now.compare_to(baseline.filter_traces(ours), "traceback")
    lines = []
    for stat in stats[:top]:
        frames = [f"{f.filename.removeprefix(str(ROOT) + '/')}:{f.lineno}" for f in stat.traceback]
        # oldest frame first: the innermost is the last, the project's nearest to it named
        own = next((f for f in reversed(frames) if not f.startswith(("/", ".venv/"))), "-")
        lines.append(
            f"{stat.size_diff / 1024:+9.1f} KiB {stat.count_diff:+7d} blocks  {own}  "
            f"(innermost {frames[-1]})"
        )
    return "\n".join(lines)


# -- the TUI and the driver ------------------------------------------------------------


def store_mib(db: Path) -> float:
    files = (db, db.with_name(db.name + "-wal"))
    return sum(f.stat().st_size for f in files if f.exists()) / 2**20


async def soak(workdir: Path, minutes: int, minute_s: float) -> dict[str, Any]:
    from textual.widgets import Select

    from control.config import load_config
    from control.model import NodeStatus
    from control.wiring import build_services
    from tests.tui.helpers import wait_until
    from tui.app import create_app

    config = replace(load_config(workdir / "config.toml"), db_path=workdir / "runs.db")
    samples: list[dict[str, Any]] = []
    counts = {"engines": 0, "runs": 0, "stopped": 0, "not_offered": 0}
    baselines: list[tracemalloc.Snapshot] = []  # the TUI's own, where traced
    objects: list[Counter[str]] = []  # the TUI's live objects at minute 2
    async with build_services(config) as services:
        app = create_app(config, services=services)
        client: Any = services.nodes[0].client
        store: Any = services.store
        async with app.run_test(size=(120, 40)) as pilot:
            await wait_until(pilot, lambda: app.model.nodes[NODE].status is NodeStatus.OK, "agent")
            started = time.monotonic()

            node = app.model.nodes[NODE]

            def sample() -> None:
                agent = json.loads((workdir / "agent-stats.json").read_text())
                samples.append(
                    {
                        "minute": len(samples),
                        "tui": process_figures() | {"tasks": len(asyncio.all_tasks())},
                        "tui_heap": heap_figures(),
                        "agent": agent,
                        "store_mib": store_mib(config.db_path),
                        "runs": counts["runs"],
                        # how old the newest frame the TUI holds is: a frozen stream shows
                        "frame_age_s": services.clock() - (node.last_frame_at or 0.0),
                        "loadavg_1m": os.getloadavg()[0],
                    }
                )
                print(json.dumps(samples[-1]), flush=True)

            async def every_minute() -> None:
                while len(samples) <= minutes:
                    await asyncio.sleep(started + minute_s * len(samples) - time.monotonic())
                    sample()
                    if len(samples) == 3:  # minute 2: growth is judged from here
                        (workdir / "BASELINE").write_text("minute 2")
                        objects.append(live_objects())
                        if tracemalloc.is_tracing():
                            baselines.append(tracemalloc.take_snapshot())

            sample()
            sampler = asyncio.create_task(every_minute())
            await pilot.press("4")
            while len(samples) <= minutes:
                engine = await client.start("sim", {"profile": SIM_PROFILE}, [0], runtime="sim")
                counts["engines"] += 1
                key = f"{NODE}/{engine.id}"
                screen: Any = app.screen
                offered = partial(lambda k, s: k in s.target_keys, key, screen)
                try:
                    await wait_until(pilot, offered, "the engine", 120)
                except AssertionError as exc:  # said and counted; the soak goes on
                    counts["not_offered"] += 1
                    shown = [(n, e.id, e.health, e.url) for n, e in app.model.engines()]
                    said = f"node {node.status} {node.error}, engines shown {shown}"
                    print(f"{exc}: {key}; screen {type(screen).__name__}, {said}", flush=True)
                    await client.stop(engine.id)
                    continue
                screen.query_one("#target", Select).value = key
                screen.query_one("#profile", Select).value = "smoke"
                await pilot.pause()
                before = len(store.list_runs())
                screen.action_run()
                ended = partial(
                    lambda s, n: s.running_target is None and len(store.list_runs()) > n,
                    screen,
                    before,
                )
                await wait_until(pilot, ended, "the run to end", 300)
                counts["runs"] += 1
                stopped = await client.stop(engine.id)
                counts["stopped"] += stopped.state in ("stopped", "exited")
            await sampler
            # counted while the app still runs: on exit it unfreezes its start-up heap
            # (``gc.freeze``), which ``gc.get_objects`` does not list while frozen
            tui_types = grown_types(objects[0])
        statuses = sorted({r.status for r in store.list_runs()})
        counts["engines_left"] = len(await client.engines())
    tui_sites = grown_since(baselines[0]) if baselines else None
    return {
        "samples": samples,
        "statuses": statuses,
        "tui_growth_sites": tui_sites,
        "tui_grown_types": tui_types,
        **counts,
    }


def table(result: dict[str, Any]) -> str:
    rows = [
        "| minute | TUI RSS MiB | TUI fds | TUI tasks | agent RSS MiB | agent fds | "
        "agent tasks | store MiB | runs | frame age s | load 1m |",
        "|" + "---|" * 11,
    ]
    for s in result["samples"]:
        t, a = s["tui"], s["agent"]
        rows.append(
            f"| {s['minute']} | {t['rss_mib']:.1f} | {t['fds']} | {t['tasks']} | "
            f"{a['rss_mib']:.1f} | {a['fds']} | {a['tasks']} | {s['store_mib']:.2f} | "
            f"{s['runs']} | {s['frame_age_s']:.1f} | {s['loadavg_1m']:.1f} |"
        )
    return "\n".join(rows)


def heap_table(result: dict[str, Any]) -> str:
    """Where each process's memory is (``heap_figures``), minute by minute."""
    rows = [
        "| minute | TUI RSS anon / file MiB | TUI Python blocks k (arenas MiB) | "
        "TUI SQLite MiB (of it page cache) | TUI C heap used / free MiB | "
        "agent Python blocks k | agent C heap used / free MiB |",
        "|" + "---|" * 7,
    ]
    for s in result["samples"]:
        t, a, rss = s["tui_heap"], s["agent"], s["tui"]
        rows.append(
            f"| {s['minute']} | {rss.get('rss_anon_mib', 0):.1f} / "
            f"{rss.get('rss_file_mib', 0):.1f} | {t['py_blocks_k']:.0f} "
            f"({t.get('py_arenas_mib', 0):.1f}) | "
            f"{t['sqlite_mib']:.2f} ({t['sqlite_cache_mib']:.2f}) | "
            f"{t['malloc_used_mib']:.1f} / {t['malloc_free_mib']:.1f} | "
            f"{a['py_blocks_k']:.0f} | {a['malloc_used_mib']:.1f} / {a['malloc_free_mib']:.1f} |"
        )
    return "\n".join(rows)


def growth(result: dict[str, Any], first: int = 2) -> dict[str, float]:
    """Each figure's change from minute ``first`` to the last minute."""
    a, b = result["samples"][first], result["samples"][-1]
    out = {
        f"{who} {k}": b[who][k] - a[who][k] for who in ("tui", "tui_heap", "agent") for k in a[who]
    }
    out["store_mib"] = b["store_mib"] - a["store_mib"]
    out["runs"] = b["runs"] - a["runs"]
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.soak",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--minutes", type=int, default=20)
    p.add_argument("--json", type=Path, help="also write the samples here")
    p.add_argument(
        "--trace-memory",
        action="store_true",
        help="trace the agent's and the TUI's allocations (tracemalloc, slower) and print "
        "where each one's memory grew from minute 2 to the end",
    )
    p.add_argument("--agent", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--minute-s", type=float, default=60.0, help=argparse.SUPPRESS)  # a quick try
    args = p.parse_args(argv)
    if args.agent:
        asyncio.run(serve_agent(args.agent))
        return 0
    if args.minutes < 3:
        p.error("--minutes must be at least 3 (growth is judged from minute 2)")
    with tempfile.TemporaryDirectory(prefix="soak-") as tmp:
        workdir = Path(tmp)
        env = os.environ | ({"PYTHONTRACEMALLOC": "16"} if args.trace_memory else {})
        agent = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.soak", "--agent", str(workdir)],
            stdout=subprocess.DEVNULL,
            env=env,
        )
        try:
            deadline = time.monotonic() + 120
            while not (workdir / "agent-stats.json").exists():
                if agent.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit("the agent process did not start")
                time.sleep(0.2)
            if args.trace_memory:
                tracemalloc.start(16)
            result = asyncio.run(soak(workdir, args.minutes, args.minute_s))
        finally:
            (workdir / "STOP").write_text("stop")
            try:
                agent.wait(600)  # a traced agent compares its snapshots first
            except subprocess.TimeoutExpired:
                agent.kill()
                agent.wait()
            grown = workdir / "agent-growth.txt"
            growth_sites = grown.read_text() if grown.exists() else None
            types = workdir / "agent-types.txt"
            agent_types = types.read_text() if types.exists() else None
    result["agent_growth_sites"] = growth_sites
    result["agent_grown_types"] = agent_types
    result["machine"] = f"{platform.node()}: {platform.processor() or platform.machine()}, " \
        f"{os.cpu_count()} CPUs, Python {platform.python_version()}"  # fmt: skip
    result["growth_2_to_end"] = growth(result)
    print(table(result))
    print(heap_table(result))
    said = (
        "engines",
        "not_offered",
        "stopped",
        "engines_left",
        "runs",
        "statuses",
        "growth_2_to_end",
        "tui_grown_types",
        "agent_grown_types",
    )
    print(json.dumps({k: result[k] for k in said}))
    if result["agent_growth_sites"]:
        print("Where the agent's traced memory grew from minute 2:")
        print(result["agent_growth_sites"])
    if result["tui_growth_sites"]:
        print("Where the TUI's traced memory grew from minute 2:")
        print(result["tui_growth_sites"])
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
