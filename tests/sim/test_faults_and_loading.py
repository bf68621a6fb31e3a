"""Health while loading, and every injected fault, as a client meets them."""

from __future__ import annotations

import asyncio
import itertools
import json

import aiohttp
import pytest

from sim import FaultConfig, Outcome
from tests.sim.conftest import LOADING_S, StartSim
from tests.waiting import apoll_until

CHAT = [{"role": "user", "content": "Tell me a long story."}]
STREAM = {"messages": CHAT, "max_tokens": 30, "ignore_eos": True, "stream": True}


async def test_llamacpp_answers_loading_model_until_loaded(sim_factory: StartSim) -> None:
    sim = await sim_factory(
        "h100-llama2-7b-llamacpp", time_scale=0.02, faults=FaultConfig(load_time_s=LOADING_S)
    )
    async with aiohttp.ClientSession() as s:
        for path in ("/health", "/metrics"):
            async with s.get(sim.url + path) as r:
                assert r.status == 503
                assert await r.json() == {
                    "error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}
                }
        await sim.wait_ready()
        async with s.get(sim.url + "/health") as r:
            assert (r.status, await r.json()) == (200, {"status": "ok"})


async def test_vllm_refuses_connections_while_loading(sim_factory: StartSim) -> None:
    sim = await sim_factory(
        "h100-llama2-7b-vllm", time_scale=0.02, faults=FaultConfig(load_time_s=LOADING_S)
    )
    async with aiohttp.ClientSession() as s:
        with pytest.raises(aiohttp.ClientConnectorError):
            await s.get(sim.url + "/health")
        await sim.wait_ready()
        async with s.get(sim.url + "/health") as r:
            assert r.status == 200


async def test_ollama_is_running_while_the_model_loads(sim_factory: StartSim) -> None:
    sim = await sim_factory(
        "h100-llama3.1-8b-ollama", time_scale=0.02, faults=FaultConfig(load_time_s=LOADING_S)
    )
    async with aiohttp.ClientSession() as s:
        async with s.get(sim.url + "/") as r:
            assert (r.status, await r.text()) == (200, "Ollama is running")
        async with s.get(sim.url + "/api/ps") as r:
            assert (await r.json())["models"] == []
        # A generation request waits for the load instead of failing.
        body = {"messages": CHAT, "stream": False, "options": {"num_predict": 3}}
        async with s.post(sim.url + "/api/chat", json=body) as r:
            answer = await r.json()
        assert answer["eval_count"] == 3
        async with s.get(sim.url + "/api/ps") as r:
            assert len((await r.json())["models"]) == 1


async def test_sglang_health_is_503_while_loading(sim_factory: StartSim) -> None:
    sim = await sim_factory(
        "h100-llama2-7b-sglang", time_scale=0.02, faults=FaultConfig(load_time_s=LOADING_S)
    )
    async with aiohttp.ClientSession() as s:
        async with s.get(sim.url + "/health") as r:
            assert r.status == 503
        await sim.wait_ready()
        async with s.get(sim.url + "/health") as r:
            assert r.status == 200


async def test_error_rate_answers_500(sim_factory: StartSim) -> None:
    sim = await sim_factory(
        "h100-llama2-7b-vllm", time_scale=0.02, faults=FaultConfig(error_rate=1.0)
    )
    async with (
        aiohttp.ClientSession() as s,
        s.post(sim.url + "/v1/chat/completions", json=STREAM) as r,
    ):
        assert r.status == 500
        assert "fault injection" in (await r.json())["error"]["message"]


async def test_error_rate_is_a_fraction_fixed_by_the_seed(sim_factory: StartSim) -> None:
    statuses = []
    for _ in range(2):
        sim = await sim_factory(
            "h100-llama2-7b-vllm", time_scale=0.01, seed=7, faults=FaultConfig(error_rate=0.3)
        )
        body = {"messages": CHAT, "max_tokens": 2}
        async with aiohttp.ClientSession() as s:
            run = []
            for _ in range(30):
                async with s.post(sim.url + "/v1/chat/completions", json=body) as r:
                    run.append(r.status)
        statuses.append(run)
    assert statuses[0] == statuses[1]
    assert 3 <= statuses[0].count(500) <= 18 and statuses[0].count(200) >= 12


async def test_dropped_connection_mid_stream(sim_factory: StartSim) -> None:
    sim = await sim_factory(
        "h100-llama2-7b-vllm", time_scale=0.05, faults=FaultConfig(drop_rate=1.0)
    )
    lines: list[bytes] = []
    async with aiohttp.ClientSession() as s:
        with pytest.raises(aiohttp.ClientPayloadError):
            async with s.post(sim.url + "/v1/chat/completions", json=STREAM) as r:
                assert r.status == 200
                async for line in r.content:
                    lines.append(line)
    assert b"data: [DONE]\n" not in lines
    [trace] = sim.ground_truth()
    assert trace.outcome is Outcome.ABORTED and "dropped" in trace.detail
    assert 1 <= trace.output_tokens < 30


async def test_stall_pauses_the_stream(sim_factory: StartSim) -> None:
    sim = await sim_factory(
        "h100-llama2-7b-vllm",
        time_scale=0.05,
        faults=FaultConfig(stall_rate=1.0, stall_s=0.5),
    )
    loop = asyncio.get_running_loop()
    times: list[float] = []
    async with (
        aiohttp.ClientSession() as s,
        s.post(sim.url + "/v1/chat/completions", json=STREAM) as r,
    ):
        async for line in r.content:
            if line.startswith(b"data: {") and json.loads(line[6:])["choices"]:
                times.append(loop.time())
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert max(gaps) >= 0.45
    [trace] = sim.ground_truth()
    assert trace.outcome is Outcome.OK and "stalled" in trace.detail


async def test_crash_after_n_requests(sim_factory: StartSim) -> None:
    sim = await sim_factory(
        "h100-llama2-7b-vllm", time_scale=0.02, faults=FaultConfig(crash_after=2)
    )
    body = {"messages": CHAT, "max_tokens": 3}
    async with aiohttp.ClientSession() as s:
        for _ in range(2):
            async with s.post(sim.url + "/v1/chat/completions", json=body) as r:
                assert r.status == 200
        with pytest.raises(aiohttp.ClientError):
            async with s.post(sim.url + "/v1/chat/completions", json=body) as r:
                await r.read()
        assert sim.crashed

        async def refused() -> bool:  # the listener closes as the crash unwinds
            try:
                async with s.get(sim.url + "/v1/models"):
                    return False
            except aiohttp.ClientConnectorError:
                return True

        await apoll_until(
            refused, "the crashed engine's port to refuse", ignoring=(aiohttp.ClientError,)
        )


def test_fault_config_refuses_nonsense() -> None:
    with pytest.raises(ValueError, match="error_rate"):
        FaultConfig(error_rate=1.5)
    with pytest.raises(ValueError, match="crash_after"):
        FaultConfig(crash_after=-1)
