"""The demo's wiring: an embedded agent with replayed GPUs, five simulated engines,
the simulated seed comparison — computed once per kept store."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from control.demo import DEMO_NODE, LIVE_SIMS, DemoOptions, RealEngine, demo_banner, demo_services
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
