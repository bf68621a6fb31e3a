"""The demo's wiring: an embedded agent with replayed GPUs, five simulated engines,
the simulated seed comparison — computed once per kept store."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp

from agents.config import bundled_trace
from control.demo import (
    DEMO_NODE,
    LIVE_SIMS,
    SEED_NODE,
    DemoOptions,
    RealEngine,
    demo_banner,
    demo_services,
)
from control.demo_runs import SEED_PROFILES
from sim import load_profile
from telemetry import GpuSample, TelemetryFrame
from tests.waiting import apoll_until


async def start_up(services: Any) -> list[tuple[str, float | None, bool]]:
    reports: list[tuple[str, float | None, bool]] = []
    await services.on_start(lambda text, fraction, done: reports.append((text, fraction, done)))
    return reports


async def test_demo_starts_sims_and_computes_the_seed_runs_once(tmp_path: Path) -> None:
    options = DemoOptions(gpus=2, db=tmp_path / "demo.db")
    async with demo_services(options) as (config, services):
        assert config.db_path == tmp_path / "demo.db"
        assert "SIMULATED" in services.banner
        (node,) = services.nodes
        assert node.name == DEMO_NODE
        reports = await start_up(services)
        assert reports[-1][2] is True
        runs = services.store.list_runs()
        assert sorted(r.engine_kind for r in runs) == [
            "llamacpp",
            "lmdeploy",
            "ollama",
            "trtllm",
            "vllm",
        ]
        assert all(r.simulated and r.status == "completed" for r in runs)
        client: Any = node.client
        engines = await apoll_until(
            client.engines,
            "every live simulator to be healthy",
            done=lambda engines: (
                len(engines) == len(LIVE_SIMS) and all(e.health == "healthy" for e in engines)
            ),
        )
        assert sorted(e.kind for e in engines) == [
            "llamacpp",
            "lmdeploy",
            "ollama",
            "trtllm",
            "vllm",
        ]
        assert all(e.simulated for e in engines)

    async with demo_services(DemoOptions(gpus=2, db=tmp_path / "demo.db")) as (_, services):
        services_runs_before = len(services.store.list_runs())
        await start_up(services)
        assert len(services.store.list_runs()) == services_runs_before == 5


def test_the_banner_says_in_words_how_to_start_the_real_engine() -> None:
    image = "infer-top/llama-server:0.3.36-r1"
    banner = demo_banner(RealEngine(image))
    assert f"real llama.cpp available (image {image})" in banner
    assert "press 3, model /models/tiny.gguf, s to start it" in banner
    assert "(" not in demo_banner(None) and "SIMULATED" in demo_banner(None)


IDLE_UTIL_PCT, IDLE_POWER_W = 5.0, 150.0
BUSY_UTIL_PCT, BUSY_POWER_W = 90.0, 300.0


def idle(gpu: GpuSample) -> bool:
    return (gpu.util_pct or 0) <= IDLE_UTIL_PCT and (gpu.power_w or 0) < IDLE_POWER_W


def busy(gpu: GpuSample) -> bool:
    return (gpu.util_pct or 0) >= BUSY_UTIL_PCT and (gpu.power_w or 0) >= BUSY_POWER_W


@asynccontextmanager
async def streams(url: str, model: str, concurrency: int) -> AsyncIterator[list[int]]:
    """``concurrency`` clients sending chat streams one after another until the block ends;
    yields the count of finished streams."""
    done = [0]

    async def client(session: aiohttp.ClientSession) -> None:
        body = {
            "model": model,
            "messages": [{"role": "user", "content": "tell a long story"}],
            "max_tokens": 256,
            "stream": True,
        }
        while True:
            async with session.post(f"{url}/v1/chat/completions", json=body) as resp:
                assert resp.status == 200, await resp.text()
                async for _ in resp.content:
                    pass
            done[0] += 1

    async with aiohttp.ClientSession() as session:
        tasks = [asyncio.create_task(client(session)) for _ in range(concurrency)]
        try:
            yield done
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)


async def test_the_demos_replayed_gpus_idle_with_its_engines_and_work_under_load(
    tmp_path: Path,
) -> None:
    """Not 99 % at 690 W on an idle fleet: each replayed GPU plays the part of the H200
    recording that matches what the simulated engines on it do."""
    gpus = 8
    async with demo_services(DemoOptions(gpus=gpus, db=tmp_path / "demo.db", runs=False)) as (
        _,
        services,
    ):
        await start_up(services)
        (node,) = services.nodes
        client: Any = node.client
        engines = await apoll_until(
            client.engines,
            "every live simulator to be healthy",
            done=lambda engines: (
                len(engines) == len(LIVE_SIMS) and all(e.health == "healthy" for e in engines)
            ),
        )
        held = {i for e in engines for i in e.gpu_ids}
        assert held == set(range(len(LIVE_SIMS)))  # GPUs 5-7 run nothing

        def memory_gib(frame: TelemetryFrame) -> dict[int, float]:
            return {g.index: (g.mem_used_bytes or 0) / 2**30 for g in frame.gpus}

        frame = await apoll_until(
            client.snapshot,
            "a frame of the idle fleet, its engines' GPUs holding memory",
            done=lambda f: len(f.gpus) == gpus and all(memory_gib(f)[i] > 10 for i in held),
        )
        assert all(idle(g) for g in frame.gpus), frame.gpus
        assert all(memory_gib(frame)[i] < 1 for i in set(range(gpus)) - held), frame.gpus

        vllm = next(e for e in engines if e.kind == "vllm")
        (loaded,) = vllm.gpu_ids
        model = load_profile(vllm.config["profile"]).model
        async with streams(vllm.url, model, concurrency=8) as finished:
            frame = await apoll_until(
                client.snapshot,
                f"GPU {loaded} to show the load of the vLLM simulator on it",
                done=lambda f: busy(f.gpus[loaded]),
            )
            assert all(idle(g) for g in frame.gpus if g.index != loaded), frame.gpus
            # the streams really were served: the busy frame can come before the first
            # 256-token stream ends (on a fast box, or a slow one's late stream)
            await apoll_until(lambda: finished[0] > 0, "a first stream to finish", timeout_s=60)
        await apoll_until(
            client.snapshot,
            f"GPU {loaded} to idle again once its engine has no request",
            done=lambda f: idle(f.gpus[loaded]),
        )


def test_the_demo_node_and_its_engines_name_one_gpu() -> None:
    """The replayed GPU is an H200, so the live simulators are H200 profiles; the seed's
    H100 comparison says it ran on simulated H100s, not on the demo node."""
    static = json.loads(bundled_trace().read_text())["static"]
    assert static["name"] == "NVIDIA H200" and DEMO_NODE.startswith("h200")
    for name in LIVE_SIMS:
        profile = load_profile(name)
        assert name.startswith("h200-") and profile.hardware.startswith("H200"), name
    assert SEED_NODE.startswith("h100") and all(p.startswith("h100-") for p in SEED_PROFILES)
