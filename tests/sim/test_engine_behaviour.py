"""Scheduler behaviour seen through HTTP: seeds, preemption, prefix cache, labels."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from engines.catalog import get_spec
from sim import is_simulated, load_profile, server
from tests.sim.conftest import StartSim
from tests.waiting import apoll_until

VLLM = "h100-llama2-7b-vllm"


def values(text: str) -> dict[str, float]:
    return {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples}


async def test_same_seed_same_answers(sim_factory: StartSim) -> None:
    async def answers(seed: int) -> list[tuple[str, str]]:
        sim = await sim_factory("h100-llama2-7b-tgi", time_scale=0.01, seed=seed)
        out = []
        async with aiohttp.ClientSession() as s:
            for i in range(3):
                body = {"prompt": f"Once upon a time {i}", "max_tokens": 400, "stream": True}
                async with s.post(sim.url + "/v1/completions", json=body) as r:
                    events = [
                        json.loads(line[6:])
                        async for line in r.content
                        if line.startswith(b"data: {")
                    ]
                assert all(e["object"] == "text_completion" for e in events)
                text = "".join(e["choices"][0]["text"] for e in events if e["choices"])
                out.append((events[0]["id"], text))
        return out

    first, again, other = await answers(3), await answers(3), await answers(4)
    assert first == again
    assert [t for _, t in first] != [t for _, t in other]
    # TGI cannot force length: lengths come from the seeded EOS draw, not max_tokens.
    assert len({len(t) for _, t in first}) > 1


async def test_full_kv_pool_preempts_over_http(sim_factory: StartSim) -> None:
    profile = load_profile(VLLM).with_overrides(kv_blocks=12, kv_block_size_tokens=16)
    sim = await sim_factory(profile, time_scale=0.05)
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 60, "ignore_eos": True}
    async with aiohttp.ClientSession() as s:

        async def one() -> int:
            async with s.post(sim.url + "/v1/chat/completions", json=body) as r:
                return int((await r.json())["usage"]["completion_tokens"])

        assert await asyncio.gather(*(one() for _ in range(4))) == [60] * 4
        async with s.get(sim.url + "/metrics") as r:
            metrics = values(await r.text())
    assert metrics["vllm:num_preemptions_total"] > 0
    assert sum(t.preemptions for t in sim.ground_truth()) == metrics["vllm:num_preemptions_total"]


async def test_shared_prefix_hits_the_cache(sim_factory: StartSim) -> None:
    sim = await sim_factory(VLLM, time_scale=0.05)
    system = "You are a terse assistant. " * 20
    async with aiohttp.ClientSession() as s:
        cached = []
        for question in ("What is KV cache?", "What is paged attention?"):
            body = {
                "messages": [
                    {"role": "system", "content": system},
                    {"role": "user", "content": question},
                ],
                "max_tokens": 4,
            }
            async with s.post(sim.url + "/v1/chat/completions", json=body) as r:
                answer = await r.json()
            cached.append(answer["usage"]["prompt_tokens_details"]["cached_tokens"])
        async with s.get(sim.url + "/metrics") as r:
            sample = get_spec("vllm").parse_metrics(await r.text())
    assert cached[0] == 0 and cached[1] >= 96
    assert sample.prefix_cache_hit_rate is not None and sample.prefix_cache_hit_rate > 0.3
    truth = sim.ground_truth()
    assert truth[1].ttft_s is not None and truth[0].ttft_s is not None
    assert truth[1].cached_tokens == cached[1]


async def test_everything_served_is_marked_simulated(sim_factory: StartSim) -> None:
    sim = await sim_factory("h100-llama2-7b-lmdeploy", time_scale=0.02)
    async with aiohttp.ClientSession() as s:
        async with s.get(sim.url + "/v1/models") as r:
            assert is_simulated(headers=dict(r.headers), models=await r.json())
            assert is_simulated(models=await r.json())
        async with s.get(sim.url + "/metrics") as r:
            text = await r.text()
        async with s.get(sim.url + "/no-such-path") as r:
            assert r.status == 404 and is_simulated(headers=dict(r.headers))
    assert is_simulated(sample=get_spec("lmdeploy").parse_metrics(text))
    assert not is_simulated(headers={"Server": "uvicorn"}, models={"data": [{"owned_by": "vllm"}]})


async def test_client_going_away_frees_its_sequence(sim_factory: StartSim) -> None:
    sim = await sim_factory(VLLM, time_scale=0.5)
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 500, "stream": True}
    body["ignore_eos"] = True
    async with aiohttp.ClientSession() as s:
        async with s.post(sim.url + "/v1/chat/completions", json=body) as r:
            for _ in range(3):
                await r.content.readline()
            r.close()  # hang up mid-stream
        await apoll_until(sim.ground_truth, "the aborted request's trace")
        async with s.get(sim.url + "/metrics") as r:
            metrics = values(await r.text())
    [trace] = sim.ground_truth()
    assert trace.outcome == "aborted" and trace.output_tokens < 500
    assert metrics["vllm:num_requests_running"] == 0
    assert metrics["vllm:kv_cache_usage_perc"] == 0


async def test_request_deferred_past_the_timeout_fails_with_503(sim_factory: StartSim) -> None:
    profile = load_profile("h100-llama2-7b-llamacpp").with_overrides(
        max_num_seqs=1, queue_timeout_s=1.0
    )
    sim = await sim_factory(profile, time_scale=0.1)
    long = {"messages": [{"role": "user", "content": "a"}], "max_tokens": 300, "ignore_eos": True}
    async with aiohttp.ClientSession() as s:

        async def post(body: dict[str, object]) -> tuple[int, dict]:
            async with s.post(sim.url + "/v1/chat/completions", json=body) as r:
                return r.status, await r.json()

        first = asyncio.ensure_future(post(long))

        async def running() -> float:
            async with s.get(sim.url + "/metrics") as r:
                return values(await r.text()).get("llamacpp:requests_processing", 0.0)

        # The second must arrive while the first holds the only sequence.
        await apoll_until(
            running, "the first request to run", done=lambda n: n == 1 or first.done()
        )
        status, answer = await post({**long, "max_tokens": 5})
        assert (await first)[0] == 200
    assert status == 503 and "queue timeout" in answer["error"]["message"]
    outcomes = sorted(str(t.outcome) for t in sim.ground_truth())
    assert outcomes == ["ok", "timeout"]


async def test_ground_truth_memory_is_bounded(
    sim_factory: StartSim, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(server, "GROUND_TRUTH_TOKEN_LIMIT", 25)
    sim = await sim_factory(VLLM, time_scale=0.01)
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 9, "ignore_eos": True}
    async with aiohttp.ClientSession() as s:
        for _ in range(5):
            async with s.post(sim.url + "/v1/chat/completions", json=body) as r:
                assert r.status == 200
    kept = sim.ground_truth()
    assert [t.request_id[-1] for t in kept] == ["3", "4"]  # 2 × (9 + 1) <= 25
