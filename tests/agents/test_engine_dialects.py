"""Engines through the real agent, as their own versions speak: the metric names are
those of the version the running engine states (a Jetson vLLM 0.8 still shows KV and
inter-token latency), and SGLang's 503 is "loading" before it was ready and
"overloaded" after.  The engines are tests/agents/standin_engine.py run by the agent's
process runtime, serving pages built from the engines' sources (see the fixtures'
provenance headers)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from agents.client import AgentClient
from agents.config import AgentConfig
from agents.embedded import embedded_agent
from tests.agents.test_engine_faults import (
    STANDIN,
    by_id,
    engine_where,
    engines_killed_afterwards,
    frame_where,
)

ENGINES = Path(__file__).resolve().parents[1] / "fixtures" / "engines"


@pytest.fixture
def native_standins(
    make_config: Callable[..., AgentConfig], tmp_path: Path
) -> Iterator[AgentConfig]:
    """An agent whose native vLLM and SGLang are the stand-in engine."""
    wrapper = tmp_path / "standin"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{STANDIN}" "$@"\n')
    wrapper.chmod(0o755)
    config = make_config(
        native_binaries={"vllm": wrapper, "sglang": wrapper},
        model_dirs=(tmp_path / "engines",),
        interval_s=0.3,
        health_interval_s=0.3,
    )
    with engines_killed_afterwards(config.state_dir, str(STANDIN)):
        yield config


def pages(tmp_path: Path, name: str, metrics: str, version: str | None) -> Path:
    where = tmp_path / "engines" / name
    (where / "model").mkdir(parents=True)
    (where / "metrics").write_text(metrics)
    if version is not None:
        (where / "version").write_text(version)
    return where


async def test_a_jetson_vllm_08_is_read_in_its_own_dialect(
    native_standins: AgentConfig, tmp_path: Path
) -> None:
    """The catalog pins vLLM 0.11 (KV gauge and ITL histogram renamed since 0.8); the
    engine says 0.8.6 at /version, so its 0.8 names are read: KV and ITL show."""
    page = (ENGINES / "vllm_0.8_fixture_from_source.txt").read_text()
    where = pages(tmp_path, "jetson-vllm", page, "0.8.6")
    async with (
        embedded_agent(native_standins) as (url, token),
        AgentClient(url, token) as client,
    ):
        info = await client.start("vllm", {"model": str(where / "model")}, runtime="process")
        assert info.engine_version == "0.8.6", info
        assert info.engine_version_from and "/version" in info.engine_version_from
        frame = await frame_where(
            client, lambda f: info.id in by_id(f) and by_id(f)[info.id].kv_cache_usage is not None,
            timeout_s=15,
        )  # fmt: skip
        assert frame is not None, "no KV-cache reading from a vLLM 0.8 engine"
        engine = by_id(frame)[info.id]
        assert engine.kv_cache_usage == 0.62
        assert engine.itl_p50_s is not None and 0 < engine.itl_p50_s <= 0.025
        assert engine.prefix_cache_hit_rate == 0.25
        assert (await client.engine(info.id)).engine_version == "0.8.6"  # kept for scraping
        await client.stop(info.id)


async def test_an_engine_that_states_no_version_gets_every_known_name(
    native_standins: AgentConfig, tmp_path: Path
) -> None:
    """An operator's own image that says no version: not the catalog's pinned 0.11 names
    (which would miss a 0.8 engine's KV), but whichever known name the engine exports."""
    page = (ENGINES / "vllm_0.8_fixture_from_source.txt").read_text()
    where = pages(tmp_path, "own-vllm", page, None)
    launch = {"model": str(where / "model"), "image": "registry.example/own-vllm:1"}
    config = replace(native_standins, allowed_images=frozenset({launch["image"]}))
    async with embedded_agent(config) as (url, token), AgentClient(url, token) as client:
        info = await client.start("vllm", launch, runtime="process")
        assert (info.engine_version, info.engine_version_from) == (None, None), info
        frame = await frame_where(
            client, lambda f: info.id in by_id(f) and by_id(f)[info.id].kv_cache_usage is not None,
            timeout_s=15,
        )  # fmt: skip
        assert frame is not None and by_id(frame)[info.id].itl_p50_s is not None
        await client.stop(info.id)


async def test_sglang_503_is_loading_before_ready_and_overloaded_after(
    native_standins: AgentConfig, tmp_path: Path
) -> None:
    page = (ENGINES / "sglang_metrics_docs_sample.txt").read_text()
    page = "\n".join(ln for ln in page.splitlines() if not ln.startswith(("$ ", "...")))
    where = pages(tmp_path, "sglang", page + "\n", "0.5.3")
    busy = where / "health-503"
    busy.touch()  # ServerStatus.Starting: a bare 503
    async with (
        embedded_agent(native_standins) as (url, token),
        AgentClient(url, token) as client,
    ):
        info = await client.start(
            "sglang", {"model": str(where / "model")}, runtime="process", wait=False
        )
        loading = await engine_where(client, info.id, lambda e: e.state == "loading", 15)
        assert (loading.state, loading.health) == ("loading", "loading"), loading
        busy.unlink()
        ready = await engine_where(client, info.id, lambda e: e.health == "healthy", 15)
        assert ready.state == "ready" and ready.engine_version == "0.5.3", ready

        busy.touch()  # up, and its one-token health check timed out: too busy
        overloaded = await engine_where(client, info.id, lambda e: e.health != "healthy", 15)
        assert (overloaded.state, overloaded.health) == ("ready", "overloaded"), overloaded
        assert overloaded.message and "HTTP 503" in overloaded.message
        assert "too busy" in overloaded.message
        frame = await frame_where(
            client, lambda f: by_id(f).get(info.id) is not None
            and by_id(f)[info.id].health == "overloaded", timeout_s=10,
        )  # fmt: skip
        assert frame is not None  # the TUI's engine table shows what the frame says
        events = [e.kind for e in await client.recent_events() if e.engine_id == info.id]
        assert "overloaded" in events and "unhealthy" not in events, events

        busy.unlink()
        back = await engine_where(client, info.id, lambda e: e.health == "healthy", 15)
        assert back.health == "healthy", back
        await client.stop(info.id)
