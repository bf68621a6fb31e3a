"""The catalog reads a simulated engine exactly as it reads the real one.

Same parser (``engines.catalog``), same normalised fields: what a real engine's
recorded scrape fills in, the simulator's scrape fills in too; and the
catalog's health rules classify the simulator's loading phase as loading.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import aiohttp
import pytest

from engines.catalog import Health, get_spec, merge_llamacpp, parse_llamacpp_slots
from engines.sample import EngineSample
from sim import FaultConfig, list_profiles, load_profile
from tests.sim.conftest import LOADING_S, StartSim

FIX = Path(__file__).resolve().parents[1] / "fixtures"
KINDS = ("vllm", "sglang", "tgi", "llamacpp", "ollama", "trtllm", "lmdeploy")
NOT_COMPARED = {"raw", "engine", "engine_version", "kv_cache_usage_is_estimate"}
# Series the real engine defines but its recorded sample happens not to carry.
DEFINED_NOT_SAMPLED = {"lmdeploy": {"e2e_latency"}}


def recorded(kind: str) -> str | None:
    """The real engine's recorded scrape (provenance comments and elisions dropped)."""
    files = {
        "vllm": FIX / "engines" / "vllm_v1_fixture_from_source.txt",
        "sglang": FIX / "engines" / "sglang_metrics_docs_sample.txt",
        "tgi": FIX / "engines" / "tgi_metrics_fixture_from_source.txt",
        "llamacpp": FIX / "llamacpp-live" / "metrics-under-load.txt",
        "lmdeploy": FIX / "engines" / "lmdeploy_metrics_fixture_from_source.txt",
        "ollama": FIX / "engines" / "ollama_api_samples.txt",
    }
    if kind not in files:
        return None  # TensorRT-LLM: only names were recorded, no scrape
    text = files[kind].read_text()
    if kind == "ollama":
        text = text[text.index("{") : text.index("# Final object")]
    lines = [ln for ln in text.splitlines() if not ln.startswith(("$ ", "...", "# PROVENANCE"))]
    return "\n".join(lines) + "\n"


def filled(sample: EngineSample) -> set[str]:
    return {
        f.name
        for f in dataclasses.fields(sample)
        if f.name not in NOT_COMPARED and getattr(sample, f.name) is not None
    }


def profile_for(kind: str) -> str:
    return next(n for n in list_profiles() if n.startswith("h100") and load_profile(n).kind == kind)


async def scrape_after_one_request(sim_url: str, path: str) -> str:
    body = {"messages": [{"role": "user", "content": "hello"}], "max_tokens": 6}
    async with aiohttp.ClientSession() as s:
        async with s.post(sim_url + "/v1/chat/completions", json=body) as r:
            assert r.status == 200
        async with s.get(sim_url + path) as r:
            assert r.status == 200
            return await r.text()


@pytest.mark.parametrize("kind", KINDS)
async def test_same_normalised_sample_as_the_real_engine(sim_factory: StartSim, kind: str) -> None:
    spec = get_spec(kind)
    assert spec.metrics_path is not None
    sim = await sim_factory(profile_for(kind), time_scale=0.02)
    text = await scrape_after_one_request(sim.url, spec.metrics_path)
    ours = spec.parse_metrics(text)
    if spec.second_page_path and spec.second_page_format == "prometheus":
        # TensorRT-LLM: its Prometheus page completes the iteration stats, as the agent reads
        async with aiohttp.ClientSession() as s, s.get(sim.url + spec.second_page_path) as r:
            ours = spec.with_second_page(ours, await r.text())
    assert ours.engine == kind
    assert ours.generation_tokens_total in (None, 6.0)
    real_text = recorded(kind)
    if real_text is None:
        assert {"kv_cache_usage", "requests_running", "generation_tokens_total"} <= filled(ours)
    else:
        real = filled(spec.parse_metrics(real_text))
        assert real <= filled(ours), f"simulated {kind} lacks {sorted(real - filled(ours))}"
        extra = filled(ours) - real
        assert extra <= DEFINED_NOT_SAMPLED.get(kind, set())


async def test_trtllm_json_iterations_parse(sim_factory: StartSim) -> None:
    spec = get_spec("trtllm")
    sim = await sim_factory(profile_for("trtllm"), time_scale=0.02)
    assert spec.metrics_format == "json" and spec.metrics_path is not None
    sample = spec.parse_metrics(await scrape_after_one_request(sim.url, spec.metrics_path))
    assert sample.kv_cache_usage is not None and sample.requests_running is not None


async def test_llamacpp_slots_parse_like_the_real_ones(sim_factory: StartSim) -> None:
    sim = await sim_factory(profile_for("llamacpp"), time_scale=0.2)
    real = parse_llamacpp_slots((FIX / "llamacpp-live" / "slots-busy.json").read_text())
    async with aiohttp.ClientSession() as s:
        body = {"messages": [{"role": "user", "content": "hello"}], "max_tokens": 400,
                "ignore_eos": True, "stream": True}  # fmt: skip
        post = s.post(sim.url + "/v1/chat/completions", json=body)
        async with post as r:
            await r.content.readline()  # the stream has begun
            async with s.get(sim.url + "/slots") as sr:
                ours = parse_llamacpp_slots(await sr.text())
            await r.read()
        async with s.get(sim.url + "/metrics") as mr:
            metrics = get_spec("llamacpp").parse_metrics(await mr.text())
    assert ours.n_slots == 8 and real.n_slots == 4
    assert ours.processing == real.processing // 4 == 1
    assert ours.decoded_in_flight >= 1
    merged = merge_llamacpp(metrics, ours)
    assert merged.kv_cache_usage is not None and merged.kv_cache_usage_is_estimate


@pytest.mark.parametrize("kind", KINDS)
async def test_catalog_health_reads_the_loading_phase(sim_factory: StartSim, kind: str) -> None:
    spec = get_spec(kind)
    sim = await sim_factory(
        profile_for(kind), time_scale=0.02, faults=FaultConfig(load_time_s=LOADING_S)
    )

    async def probe() -> Health:
        try:
            async with (
                aiohttp.ClientSession() as s,
                s.get(sim.url + spec.health_path) as r,
            ):
                return spec.classify_health(r.status, await r.read())
        except aiohttp.ClientConnectorError:
            return spec.classify_health(None, None)

    # Ollama is "running" at once and loads the model on the first request.
    assert await probe() is (Health.READY if kind == "ollama" else Health.LOADING)
    await sim.wait_ready()
    assert await probe() is Health.READY
