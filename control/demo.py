"""The demo's wiring (``infer-top demo``): every screen on any machine — no Docker, no GPU.

An embedded agent replays a real H200 NVML recording as its GPUs, each GPU playing
the part that matches the load of the simulated engines on it (``sim``, H200 profiles,
labelled SIMULATED everywhere); the seed's H100 comparison is precomputed from the
H100 simulators' profiles at start-up, as runs of node ``h100-sim``.
When Docker and the rig's llama-server image are present, the real engine is
offered too (Engines screen: kind llamacpp, runtime compose).

This module builds the services; ``tui.demo`` is the command that opens the app on them.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from agents.client import AgentClient, AgentError
from agents.embedded import embedded_agent, embedded_config
from agents.protocol import EngineInfo
from compose import LABEL_DEPLOYMENT
from control.config import Config
from control.demo_runs import SEED_PROFILES, simulate_seed_table
from control.loads import run_load
from control.nodes import AgentLike, NodeHandle
from control.services import Report, Services
from store import Store, open_store

DEMO_NODE = "h200-demo"
LIVE_SIMS: tuple[str, ...] = (
    # The node replays an H200, so its engines are the H200 profiles.
    "h200-llama2-7b-vllm",
    "h200-llama2-7b-trtllm",
    "h200-llama2-7b-lmdeploy",
    "h200-llama3.1-8b-ollama",
    "h200-llama2-7b-llamacpp",
)
SEED_NODE = "h100-sim"
"""Where the precomputed H100 comparison says it ran: simulated H100s, not the demo node."""
BANNER = "DEMO · replayed H200 telemetry · all engines SIMULATED{real}"


@dataclass(frozen=True, slots=True)
class DemoOptions:
    gpus: int = 8
    db: Path | None = None
    sims: bool = True
    runs: bool = True


@dataclass(frozen=True, slots=True)
class RealEngine:
    image: str
    model: str = "/models/tiny.gguf"


def demo_banner(real: RealEngine | None) -> str:
    """Line 2 of every screen: what is simulated, and in words how to start the real engine."""
    offer = (
        f" · real llama.cpp available (image {real.image}): "
        f"press 3, model {real.model}, s to start it"
        if real
        else ""
    )
    return BANNER.format(real=offer)


def real_engine() -> RealEngine | None:
    """The rig's llama-server image, when Docker answers and the image is there."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    env = Path(os.environ.get("INFER_TOP_RIG_CACHE", Path(base) / "infer-top-rig")) / "rig.env"
    if shutil.which("docker") is None or not env.exists():
        return None
    values = dict(line.split("=", 1) for line in env.read_text().splitlines() if "=" in line)
    image = values.get("INFER_TOP_LLAMA_IMAGE")
    if not image:
        return None
    try:
        probe = subprocess.run(
            ["docker", "image", "inspect", image], capture_output=True, timeout=10
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return RealEngine(image) if probe.returncode == 0 else None


def _stderr(text: str) -> None:
    print(f"infer-top demo: {text}", file=sys.stderr, flush=True)


async def stop_engines(client: AgentLike, say: Callable[[str], None]) -> None:
    """Stop every engine on the demo's agent (the real llama.cpp container too, and any
    still starting); one that cannot be stopped is named with how to remove it."""
    try:
        engines = await client.engines()
    except AgentError as exc:
        say(f"could not list the demo's engines to stop them: {exc}")
        return
    if not engines:
        return
    say(f"stopping the demo's {len(engines)} engine(s)")

    async def stop(engine: EngineInfo) -> None:
        try:
            await client.stop(engine.id)
        except AgentError as exc:
            remove = (
                f"docker rm -f $(docker ps -aq --filter label={LABEL_DEPLOYMENT}={engine.id})"
                if engine.runtime == "compose"
                else "stop its process"
            )
            say(
                f"engine {engine.id} ({engine.kind}, {engine.runtime}) could not be stopped "
                f"({exc}): {remove}"
            )

    await asyncio.gather(*(stop(e) for e in engines))


@asynccontextmanager
async def demo_services(
    options: DemoOptions, real: RealEngine | None = None, say: Callable[[str], None] = _stderr
) -> AsyncIterator[tuple[Config, Services]]:
    """The demo's config and services; everything started is stopped on exit, every
    engine included (``say`` tells the operator what is stopped, and what could not be)."""
    with tempfile.TemporaryDirectory(prefix="infer-top-demo-") as tmp:
        db = options.db or Path(tmp) / "demo.db"
        config = Config(db_path=db)
        agent_config = embedded_config(
            platform="replay",
            replay_gpus=options.gpus,
            node_name=DEMO_NODE,
            state_dir=Path(tmp) / "agent",
            allowed_images=frozenset({real.image}) if real else frozenset(),
            adopt_on_start=False,
        )
        services = Services(exports_dir=Path.cwd())
        async with services.exit_stack:
            store = open_store(db)
            services.exit_stack.callback(store.close)
            services.store = store
            services.load_runner = run_load
            url, token = await services.exit_stack.enter_async_context(embedded_agent(agent_config))
            client = AgentClient(url, token)
            services.exit_stack.push_async_callback(client.close)
            # before the agent closes: it leaves Compose engines and processes running for
            # the next agent to adopt, and no agent adopts a demo's (they would outlive it)
            services.exit_stack.push_async_callback(stop_engines, client, say)
            services.nodes = (NodeHandle(DEMO_NODE, url, client, token=token),)
            services.banner = demo_banner(real)

            async def start_up(report: Report) -> None:
                await _start_up(store, client, services.clock, options, report)

            services.on_start = start_up
            yield config, services


async def _has_seed_runs(store: Store) -> bool:
    """A kept demo store (--db) already holds the simulated comparison: not again."""
    runs = await asyncio.to_thread(store.list_runs)
    found = {r.software_versions.get("sim_profile") for r in runs if r.simulated}
    return set(SEED_PROFILES) <= found


async def _start_up(
    store: Store,
    client: AgentLike,
    clock: Callable[[], float],
    options: DemoOptions,
    report: Report,
) -> None:
    if options.sims:
        for i, profile in enumerate(LIVE_SIMS):
            report(f"starting simulated engine {profile}", i / (2 * len(LIVE_SIMS)), False)
            await client.start(
                "sim", {"profile": profile}, [i % options.gpus], runtime="sim", wait=False
            )
    if options.runs and not await _has_seed_runs(store):

        def progress(text: str, fraction: float) -> None:
            report(text, fraction, False)

        await asyncio.to_thread(
            simulate_seed_table,
            store,
            node=SEED_NODE,
            start_epoch=clock() - 6 * 3600,
            progress=progress,
        )
    report("demo ready: 1 Fleet · 4 Load test · 5 Compare (simulated seed table)", 1.0, True)
