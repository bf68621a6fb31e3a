"""Adding an engine is one EngineSpec: registered with the catalog, an eighth engine
that nothing else in infer-top was told about is listed, allow-listed, offered,
estimated, parsed, rendered, started and scraped by a real agent, and simulated
when it speaks a dialect the simulator knows."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

from agents.client import AgentClient
from agents.config import AgentConfig
from agents.embedded import embedded_agent
from control.engine_ops import engine_choices
from engines.catalog import (
    EngineSpec,
    LaunchConfig,
    MemoryRule,
    UnsupportedOption,
    get_spec,
    kinds,
    register,
    unregister,
)
from engines.catalog.flags import integer
from engines.catalog.servers import VllmSpec
from engines.dialects import PromDialect
from engines.fit import GIB, KNOWN_MODELS, estimate_fit
from loadgen.quirks import known_kinds, quirks_for
from sim import ProfileError, load_profile, start_sim
from tests.agents.test_engine_faults import STANDIN, engines_killed_afterwards

FAKE_METRICS = """\
# HELP fake_running Requests being decoded.
# TYPE fake_running gauge
fake_running 3
# TYPE fake_waiting gauge
fake_waiting 2
# TYPE fake_kv_used_ratio gauge
fake_kv_used_ratio 0.25
# TYPE fake_generated_tokens_total counter
fake_generated_tokens_total 1200
"""


class FakeSpec(EngineSpec):
    """An engine infer-top has never heard of, declared in full here and nowhere else.
    Its flags are the stand-in engine's (tests/agents/standin_engine.py)."""

    kind = "fakeengine"
    display_name = "FakeEngine"
    dialect = "fakeengine"
    image = "example.invalid/fakeengine:1.0"
    container_port = 9000
    start_timeout_s = 60.0
    entrypoint = ("fake-serve",)
    memory = MemoryRule(0.5, "free", overhead_mib=512)
    metric_names = PromDialect(
        kv_usage=("fake_kv_used_ratio",),
        running=("fake_running",),
        waiting=("fake_waiting",),
        generation_tokens=("fake_generated_tokens_total",),
    )
    extra_flags = (integer("--fake-batch", low=1, high=64),)

    def _flags(self, cfg: LaunchConfig, port: int) -> list[str]:
        return ["-m", cfg.model, "--host", "0.0.0.0", "--port", str(port)]


class VllmForkSpec(VllmSpec):
    """A fork that speaks vLLM's dialect under a name of its own."""

    kind = "vllmfork"
    display_name = "vLLM fork"


@pytest.fixture
def fake_engine() -> Iterator[EngineSpec]:
    spec = register(FakeSpec())
    try:
        yield spec
    finally:
        unregister(spec.kind)


@pytest.fixture
def vllm_fork() -> Iterator[EngineSpec]:
    spec = register(VllmForkSpec())
    try:
        yield spec
    finally:
        unregister(spec.kind)


def test_listed_allow_listed_and_offered_while_registered(fake_engine: EngineSpec) -> None:
    assert kinds()[-1] == "fakeengine" and get_spec("fakeengine") is fake_engine
    config = AgentConfig(token="t" * 32)
    assert {"fakeengine", "vllm", "sim"} <= config.allowed_engines
    assert "fakeengine" in engine_choices() and engine_choices()[-1] == "sim"
    assert "fakeengine" in known_kinds()
    unregister("fakeengine")
    try:
        assert "fakeengine" not in AgentConfig(token="t" * 32).allowed_engines
        assert "fakeengine" not in engine_choices()
        with pytest.raises(KeyError, match="unknown engine kind 'fakeengine'"):
            get_spec("fakeengine")
    finally:
        register(fake_engine)


def test_fit_estimator_uses_its_memory_rule(fake_engine: EngineSpec) -> None:
    shape = KNOWN_MODELS["Llama-3.1-8B"]
    est = estimate_fit(shape, "fakeengine", context_len=4096, gpu_mem_total_bytes=80 * GIB)
    free = 80 * GIB - est.weights_bytes - 512 * 2**20
    assert est.budget_bytes == est.weights_bytes + 512 * 2**20 + int(0.5 * free)
    assert "0.5 of memory free after weights becomes KV" in est.notes


def test_its_metrics_page_parses_into_a_sample(fake_engine: EngineSpec) -> None:
    sample = get_spec("fakeengine").parse_metrics(FAKE_METRICS)
    assert sample.engine == "fakeengine"
    assert (sample.requests_running, sample.requests_waiting) == (3.0, 2.0)
    assert (sample.kv_cache_usage, sample.generation_tokens_total) == (0.25, 1200.0)
    assert sample.ttft is None  # a field its table does not name is n/a, not 0


def test_its_flags_and_compose_env_render(fake_engine: EngineSpec) -> None:
    cfg = LaunchConfig(model="org/m", port=9100, extra_args=("--fake-batch=8",))
    assert fake_engine.command_args(cfg) == [
        "-m", "org/m", "--host", "0.0.0.0", "--port", "9100", "--fake-batch", "8",
    ]  # fmt: skip
    env = fake_engine.compose_env(cfg, deployment_id="d1", node="n1", platform="nvidia")
    assert env["ENGINE_KIND"] == "fakeengine"
    assert env["ENGINE_IMAGE"] == "example.invalid/fakeengine:1.0"
    assert env["ENGINE_ARGS"] == "-m org/m --host 0.0.0.0 --port 9000 --fake-batch 8"
    assert fake_engine.compose_name("nvidia") == "fakeengine"
    with pytest.raises(UnsupportedOption, match="FakeEngine allows only these tuning flags"):
        fake_engine.command_args(LaunchConfig(model="m", extra_args=("--seed", "1")))
    assert quirks_for("fakeengine").forces_length  # the spec's default max_tokens + ignore_eos


def test_an_incomplete_spec_is_refused_by_name() -> None:
    class Half(EngineSpec):
        kind = "half"

    with pytest.raises(ValueError, match="Half does not set display_name, dialect, image"):
        register(Half())
    assert "half" not in kinds()


async def test_a_real_agent_starts_and_scrapes_it(fake_engine: EngineSpec, tmp_path: Path) -> None:
    """The default allow-list, the process runtime, the health gate and the scraper all
    take the new engine from its spec: the frame shows its fixture page's numbers."""
    pages = tmp_path / "models" / "fake"
    pages.mkdir(parents=True)
    (pages / "metrics").write_text(FAKE_METRICS)
    (pages / "model.bin").touch()
    binary = tmp_path / "fake-serve"
    binary.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{STANDIN}" "$@"\n')
    binary.chmod(0o755)
    config = AgentConfig(
        token="t" * 32, platform="replay", port=0, interval_s=0.2,
        state_dir=tmp_path / "state", node_name="testnode", adopt_on_start=False,
        native_binaries={"fakeengine": binary},
        model_dirs=(tmp_path / "models",),
    )  # fmt: skip
    with engines_killed_afterwards(config.state_dir, str(STANDIN)):
        async with embedded_agent(config) as (url, token), AgentClient(url, token) as client:
            launch = {"model": str(pages / "model.bin")}
            engine = await client.start("fakeengine", launch, runtime="process")
            assert (engine.kind, engine.health) == ("fakeengine", "healthy"), engine.message
            seen = None
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(20):
                    async for frame in client.stream():
                        seen = next(e for e in frame.engines if e.id == engine.id)
                        if seen.requests_running is not None:
                            break
            assert seen is not None and seen.scrape_error is None
            assert (seen.requests_running, seen.requests_waiting) == (3.0, 2.0)
            assert seen.kv_cache_usage == 0.25
            await client.stop(engine.id)


async def test_a_fork_speaking_vllm_is_simulated_as_vllm(vllm_fork: EngineSpec) -> None:
    profile = load_profile("h100-llama2-7b-vllm").with_overrides(kind="vllmfork", name="fork")
    sim = await start_sim(profile, host="127.0.0.1", port=0, time_scale=0.02)
    try:
        body = {"messages": [{"role": "user", "content": "hello"}], "max_tokens": 6}
        async with aiohttp.ClientSession() as s:
            async with s.post(sim.url + "/v1/chat/completions", json=body) as r:
                assert r.status == 200
            assert vllm_fork.metrics_path is not None
            async with s.get(sim.url + vllm_fork.metrics_path) as r:
                sample = vllm_fork.parse_metrics(await r.text())
    finally:
        await sim.stop()
    assert sample.engine == "vllmfork" and sample.generation_tokens_total == 6.0


async def test_the_simulator_refuses_a_dialect_it_cannot_imitate(
    fake_engine: EngineSpec,
) -> None:
    profile = load_profile("h100-llama2-7b-vllm").with_overrides(kind="fakeengine")
    with pytest.raises(ProfileError, match="FakeEngine speaks the 'fakeengine' dialect"):
        await start_sim(profile, host="127.0.0.1", port=0)
