"""Each simulated engine speaks its engine's dialect and says it is simulated."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from engines.model_pull import parse_pull_line
from sim import list_profiles, load_profile
from tests.sim.conftest import StartSim
from tests.waiting import apoll_until

CHAT = [{"role": "user", "content": "Say something."}]

# Series each dialect must expose (names as the engines' own sources spell them).
EXPECTED = {
    "vllm": ("vllm:num_requests_running", "vllm:kv_cache_usage_perc",
             "vllm:generation_tokens_total", "vllm:time_to_first_token_seconds_bucket",
             "vllm:prefix_cache_hits_total", "vllm:num_preemptions_total"),
    "sglang": ("sglang:num_running_reqs", "sglang:token_usage", "sglang:cache_hit_rate",
               "sglang:generation_tokens_total", "sglang:num_queue_reqs"),
    "tgi": ("tgi_request_count", "tgi_queue_size", "tgi_batch_current_size",
            "tgi_request_generated_tokens_sum"),
    "llamacpp": ("llamacpp:tokens_predicted_total", "llamacpp:requests_processing",
                 "llamacpp:requests_deferred", "llamacpp:n_busy_slots_per_decode"),
    "trtllm": ("trtllm_kv_cache_utilization", "trtllm_num_requests_running",
               "trtllm_generation_tokens_total"),
    "lmdeploy": ("lmdeploy:num_requests_running", "lmdeploy:gpu_cache_usage_perc",
                 "lmdeploy:generation_tokens_total", "lmdeploy:iter_token_latency_count"),
}  # fmt: skip
METRICS_PATH = {"trtllm": "/prometheus/metrics"}


def profile_for(kind: str) -> str:
    return next(n for n in list_profiles() if n.startswith("h100") and load_profile(n).kind == kind)


async def chat(s: aiohttp.ClientSession, url: str, max_tokens: int = 8) -> dict:
    body = {"messages": CHAT, "max_tokens": max_tokens, "ignore_eos": True}
    async with s.post(url + "/v1/chat/completions", json=body) as r:
        assert r.status == 200
        return await r.json()


@pytest.mark.parametrize("kind", sorted(EXPECTED))
async def test_prometheus_dialect(sim_factory: StartSim, kind: str) -> None:
    sim = await sim_factory(profile_for(kind), time_scale=0.02)
    async with aiohttp.ClientSession() as s:
        answer = await chat(s, sim.url)
        async with s.get(sim.url + METRICS_PATH.get(kind, "/metrics")) as r:
            assert r.status == 200
            assert r.headers["X-Infer-Top-Simulated"] == "1"
            text = await r.text()
    samples = {
        sample.name: sample
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }
    for name in EXPECTED[kind]:
        # prometheus_client's parser reads a counter without _total (TGI) as name_total.
        assert name in samples or f"{name}_total" in samples, f"{kind} lacks {name}"
    assert samples["infer_top_simulated"].value == 1
    generated = {
        "vllm": "vllm:generation_tokens_total",
        "sglang": "sglang:generation_tokens_total",
        "tgi": "tgi_request_generated_tokens_sum",
        "llamacpp": "llamacpp:tokens_predicted_total",
        "trtllm": "trtllm_generation_tokens_total",
        "lmdeploy": "lmdeploy:generation_tokens_total",
    }[kind]
    assert samples[generated].value == answer["usage"]["completion_tokens"] == 8


async def test_vllm_labels_and_tgi_counters(sim_factory: StartSim) -> None:
    vllm = await sim_factory(profile_for("vllm"), time_scale=0.02)
    tgi = await sim_factory(profile_for("tgi"), time_scale=0.02)
    async with aiohttp.ClientSession() as s:
        async with s.get(vllm.url + "/metrics") as r:
            text = await r.text()
        assert (
            'vllm:num_requests_running{engine="0",model_name="meta-llama/Llama-2-7b-chat-hf"}'
            in text
        )
        async with s.get(tgi.url + "/metrics") as r:
            tgi_text = await r.text()
    assert "# TYPE tgi_request_count counter" in tgi_text
    assert "tgi_request_count_total" not in tgi_text and "# HELP tgi_" not in tgi_text


async def test_llamacpp_slots_show_live_progress(sim_factory: StartSim) -> None:
    sim = await sim_factory(profile_for("llamacpp"), time_scale=0.5)
    async with aiohttp.ClientSession() as s:
        task = asyncio.ensure_future(chat(s, sim.url, max_tokens=60))

        async def get_slots() -> list[dict]:
            async with s.get(sim.url + "/slots") as r:
                return list(await r.json())

        slots = await apoll_until(
            get_slots,
            "a slot to show decoded tokens",
            done=lambda slots: any(
                x["is_processing"] and x["next_token"][0]["n_decoded"] > 0 for x in slots
            ),
            every_s=0.02,
        )
        busy = [x for x in slots if x["is_processing"]]
        async with s.get(sim.url + "/metrics") as r:
            live_metrics = await r.text()
        await task
    assert len(slots) == 8 and {"id", "n_ctx", "is_processing"} <= set(slots[0])
    assert len(busy) == 1 and busy[0]["n_prompt_tokens"] > 0
    assert 0 < busy[0]["next_token"][0]["n_decoded"] < 60
    assert "llamacpp:requests_processing 1" in live_metrics


async def test_trtllm_json_metrics_drain_iterations(sim_factory: StartSim) -> None:
    sim = await sim_factory(profile_for("trtllm"), time_scale=0.02)
    async with aiohttp.ClientSession() as s:
        await chat(s, sim.url, max_tokens=5)
        async with s.get(sim.url + "/metrics") as r:
            first = await r.json()
        async with s.get(sim.url + "/metrics") as r:
            second = await r.json()
    assert len(first) == 5 and second == []
    assert first[0]["kvCacheStats"]["tokensPerBlock"] == 32
    assert first[0]["inflightBatchingStats"]["numContextRequests"] == 1


async def test_ollama_native_api(sim_factory: StartSim) -> None:
    sim = await sim_factory(profile_for("ollama"), time_scale=0.02)
    async with aiohttp.ClientSession() as s:
        async with s.get(sim.url + "/") as r:
            assert await r.text() == "Ollama is running"
        async with s.get(sim.url + "/metrics") as r:
            assert r.status == 404  # Ollama has no Prometheus endpoint
        async with s.get(sim.url + "/api/ps") as r:
            ps = await r.json()
        assert ps["models"][0]["name"] == "llama3.1:8b"
        body = {"model": "llama3.1:8b", "messages": CHAT, "options": {"num_predict": 9}}
        async with s.post(sim.url + "/api/chat", json=body) as r:
            assert r.headers["Content-Type"].startswith("application/x-ndjson")
            lines = [json.loads(line) async for line in r.content if line.strip()]
    content = [x for x in lines if not x["done"]]
    final = lines[-1]
    assert final["done"] and final["eval_count"] == len(content) == 9
    assert final["done_reason"] == "length"
    assert final["eval_duration"] > 0 and final["prompt_eval_count"] > 0


async def test_llamacpp_closes_the_connection_after_a_stream(sim_factory: StartSim) -> None:
    sim = await sim_factory(profile_for("llamacpp"), time_scale=0.02)
    body = json.dumps({"messages": CHAT, "max_tokens": 3, "stream": True}).encode()
    reader, writer = await asyncio.open_connection("127.0.0.1", sim.port)
    writer.write(
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
    )
    await writer.drain()
    # Read to EOF: returns only because the server closes the kept-alive connection.
    raw = await asyncio.wait_for(reader.read(), timeout=10)
    writer.close()
    head = raw.split(b"\r\n\r\n", 1)[0].lower()
    assert b"data: [DONE]" in raw
    assert b"connection: close" not in head  # like llama-server: no warning in the headers


async def test_the_simulated_ollama_pulls_a_model_it_lacks_with_ollamas_progress(
    sim_factory: StartSim,
) -> None:
    sim = await sim_factory(profile_for("ollama"), time_scale=0.01)
    async with aiohttp.ClientSession() as s:
        async with s.post(sim.url + "/api/show", json={"model": "llama3.1:8b"}) as r:
            assert r.status == 200  # the profile's model: there from the start
        async with s.post(sim.url + "/api/show", json={"model": "qwen2.5:0.5b"}) as r:
            assert r.status == 404
            assert await r.json() == {"error": "model 'qwen2.5:0.5b' not found"}
        async with s.post(sim.url + "/api/pull", json={"model": "qwen2.5:0.5b"}) as r:
            lines = [line async for line in r.content if line.strip()]
        async with s.post(sim.url + "/api/show", json={"model": "qwen2.5:0.5b"}) as r:
            assert r.status == 200
    steps = [parse_pull_line(line) for line in lines]  # as the agent reads them
    assert steps[0].status == "pulling manifest" and steps[-1].done
    counted = [p.completed_bytes for p in steps if p.total_bytes]
    assert counted == sorted(counted) and counted[0] == 0 and counted[-1] == steps[1].total_bytes
