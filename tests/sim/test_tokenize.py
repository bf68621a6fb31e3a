"""The simulator answers ``/tokenize`` where the engine it imitates does, in that engine's
shape (engines.catalog ``EngineSpec.tokenize``), so a load test sizes its prompts against
the simulator as against the real engine: a prompt of L tokens sends L tokens by the
simulator's own count."""

from __future__ import annotations

import aiohttp
import pytest

from engines.catalog import get_spec
from loadgen import ClosedLoop, LoadSpec, MemorySink, Target, Workload, run_load
from runs.events import RunEvent, RunStarted
from sim import load_profile

from .conftest import StartSim

TEXT = "the prefill, of a batch"
PIECES = ["the", "prefill", ",", "of", "a", "batch"]


@pytest.mark.parametrize(
    "profile",
    ["h100-llama2-7b-llamacpp", "h100-llama2-7b-vllm", "h100-llama2-7b-sglang",
     "h100-llama2-7b-tgi"],
)  # fmt: skip
async def test_tokenize_answers_in_the_engines_shape_and_counts_as_usage_does(
    sim_factory: StartSim, profile: str
) -> None:
    sim = await sim_factory(profile, time_scale=0.05)
    await sim.wait_ready()
    route = get_spec(sim.profile.spec.kind).tokenize
    assert route is not None
    async with aiohttp.ClientSession() as http:
        async with http.post(sim.url + route.path, json=route.body(TEXT, sim.profile.model)) as r:
            assert r.status == 200, await r.text()
            answer = await r.json()
        completion = {"model": sim.profile.model, "prompt": TEXT, "max_tokens": 1}
        async with http.post(sim.url + "/v1/completions", json=completion) as r:
            usage = (await r.json())["usage"]
    assert route.count(answer) == len(PIECES) == usage["prompt_tokens"]
    if route.answer == "list":  # TGI: every token with its text and offsets
        assert [t["text"] for t in answer] == PIECES
        assert [TEXT[t["start"] : t["stop"]] for t in answer] == PIECES
    elif route.answer == "count":  # vLLM, SGLang
        assert answer["tokens"] and answer["max_model_len"] == sim.profile.max_model_len
    else:  # llama.cpp
        assert all(isinstance(t, int) for t in answer["tokens"])


async def test_tokenize_refuses_what_the_engine_would(sim_factory: StartSim) -> None:
    sim = await sim_factory("h100-llama2-7b-vllm", time_scale=0.05)
    await sim.wait_ready()
    async with aiohttp.ClientSession() as http:
        async with http.post(sim.url + "/tokenize", json={"model": "nope", "prompt": "a"}) as r:
            assert r.status == 404 and "nope" in (await r.json())["error"]["message"]
        async with http.post(sim.url + "/tokenize", json={"prompt": 3}) as r:
            assert r.status == 400 and "'prompt'" in (await r.json())["error"]["message"]


@pytest.mark.parametrize("profile", ["h100-llama2-7b-lmdeploy", "h100-llama2-7b-trtllm"])
async def test_engines_without_tokenize_have_none_in_the_simulator(
    sim_factory: StartSim, profile: str
) -> None:
    assert load_profile(profile).spec.tokenize is None
    sim = await sim_factory(profile, time_scale=0.05)
    await sim.wait_ready()
    async with aiohttp.ClientSession() as http:
        async with http.post(sim.url + "/tokenize", json={"prompt": "a"}) as r:
            assert r.status in (404, 405)


@pytest.mark.parametrize(
    ("profile", "method"),
    [
        ("h100-llama2-7b-vllm", "vllm /tokenize"),
        ("h100-llama3.1-8b-ollama", "ollama /api/generate"),
    ],
)
async def test_a_load_against_the_simulator_sends_the_asked_prompt_tokens(
    sim_factory: StartSim, profile: str, method: str
) -> None:
    sim = await sim_factory(profile, time_scale=0.05)
    await sim.wait_ready()
    sink = MemorySink()
    events: list[RunEvent] = []
    target = Target(sim.url, sim.profile.model, engine_kind=sim.profile.spec.kind)
    spec = LoadSpec((ClosedLoop(2),), requests_per_level=6)
    await run_load(spec, Workload(input_len=48, output_len=4), target, sink, events.append)
    started = next(e for e in events if isinstance(e, RunStarted))
    assert started.setup.workload["sizing"].startswith(
        f"prompts sized by the engine's tokenizer ({method}): + "
    )
    assert not [w for w in started.warnings if "not sized" in w], started.warnings
    assert len(sink.records) == 6
    for r in sink.records:
        assert r.requested_prompt_tokens is not None and r.prompt_tokens is not None
        assert r.prompt_tokens == r.requested_prompt_tokens  # by the simulator's own count
