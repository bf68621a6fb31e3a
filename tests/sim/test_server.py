"""The simulator over real HTTP: the openai client, aiohttp, ground truth."""

from __future__ import annotations

import asyncio
import gc
import json
import time
import weakref

import aiohttp
import openai
import pytest

from sim import Arrival, Outcome, load_profile, simulate, start_sim
from tests.sim.conftest import StartSim

VLLM = "h100-llama2-7b-vllm"
CHAT = [{"role": "user", "content": "Explain paged attention in one paragraph."}]


async def test_openai_client_streams_exact_length_with_usage(sim_factory: StartSim) -> None:
    sim = await sim_factory(VLLM, time_scale=0.05)
    client = openai.AsyncOpenAI(base_url=sim.url + "/v1", api_key="none", max_retries=0)
    models = await client.models.list()
    assert [m.owned_by for m in models.data] == ["infer-top-sim"]
    raw = await client.chat.completions.with_raw_response.create(
        model=sim.profile.model,
        messages=CHAT,  # type: ignore[arg-type]
        max_tokens=40,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"ignore_eos": True},
    )
    assert raw.headers["X-Infer-Top-Simulated"] == "1"
    chunks = [c async for c in raw.parse()]
    content = [c for c in chunks if c.choices and c.choices[0].delta.content]
    assert chunks[0].choices[0].delta.role == "assistant"
    assert len(content) == 40
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == 40
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
    plain = await client.completions.create(model=sim.profile.model, prompt="Hello", max_tokens=7)
    assert plain.usage is not None and plain.usage.completion_tokens <= 7
    await client.close()


async def test_engines_that_cannot_force_length_stop_at_eos(sim_factory: StartSim) -> None:
    sim = await sim_factory("h100-llama2-7b-tgi", time_scale=0.01)
    async with aiohttp.ClientSession() as s:
        body = {"messages": CHAT, "max_tokens": 2000, "ignore_eos": True}
        async with s.post(sim.url + "/v1/chat/completions", json=body) as r:
            answer = await r.json()
    assert answer["usage"]["completion_tokens"] < 2000
    assert answer["choices"][0]["finish_reason"] == "stop"


async def _stream(session: aiohttp.ClientSession, url: str, body: dict[str, object]) -> dict:
    sent = time.time()
    times: list[float] = []
    rid = None
    async with session.post(url + "/v1/chat/completions", json=body) as r:
        async for line in r.content:
            if not line.startswith(b"data: {"):
                continue
            chunk = json.loads(line[6:])
            rid = chunk["id"]
            if chunk["choices"] and chunk["choices"][0]["delta"].get("content"):
                times.append(time.time())
    return {"id": rid, "sent": sent, "times": times}


async def test_ground_truth_is_the_configured_model_queueing_included(
    sim_factory: StartSim,
) -> None:
    """4 sequences at most, 8 clients: half of them queue.  10x slower than the
    profile, so a step is ~53 ms and the mistakes are far from the noise: a client
    can never see a token before its scheduled time (causality, to 5 ms of clock
    conversion), and the bound on lateness (0.3 s) lies between what a busy
    machine adds (TTFT +29-50 ms, tokens <= 19 ms at load average 13; see
    docs/benchmarks.md) and the smallest mistake: a stream sent in one burst at
    its end (+0.58 s) or a TTFT that leaves out the queue (+0.66 s)."""
    profile = load_profile(VLLM).with_overrides(max_num_seqs=4, prefix_caching=False)
    sim = await sim_factory(profile, time_scale=10.0)
    body = {"messages": CHAT, "max_tokens": 12, "ignore_eos": True, "stream": True}
    async with aiohttp.ClientSession() as s:
        seen = await asyncio.gather(*(_stream(s, sim.url, body) for _ in range(8)))
    truth = sim.ground_truth()
    assert len(truth) == 8 and all(t.outcome is Outcome.OK for t in truth)
    first_end = min(t.finished_s or 0.0 for t in truth)
    assert sum(1 for t in truth if (t.scheduled_s or 0.0) >= first_end) == 4
    # 1) The server's timeline is exactly what the pure model computes for these arrivals.
    replay = simulate(
        profile,
        [Arrival(t.request_id, t.arrival_s, t.prompt_tokens, t.target_tokens) for t in truth],
    )
    for got, want in zip(truth, replay, strict=True):
        assert got.token_times_s == pytest.approx(want.token_times_s, abs=1e-9)
        assert got.scheduled_s == pytest.approx(want.scheduled_s, abs=1e-9)
    # 2) What a client measured is that timeline, in real seconds.
    epoch = {t.request_id: t for t in sim.ground_truth(clock="epoch")}
    for client in seen:
        true = epoch[client["id"]]
        assert len(client["times"]) == true.output_tokens == 12
        client_ttft = client["times"][0] - client["sent"]
        true_ttft = (true.first_token_s or 0) - true.arrival_s
        assert -0.005 <= client_ttft - true_ttft < 0.3
        for measured, scheduled in zip(client["times"], true.token_times_s, strict=True):
            assert -0.005 <= measured - scheduled < 0.3


async def test_llamacpp_defers_beyond_its_slots(sim_factory: StartSim) -> None:
    sim = await sim_factory("h100-llama2-7b-llamacpp", time_scale=0.05)
    body = {"messages": CHAT, "max_tokens": 20, "ignore_eos": True}
    async with aiohttp.ClientSession() as s:

        async def one() -> int:
            async with s.post(sim.url + "/v1/chat/completions", json=body) as r:
                return r.status

        assert await asyncio.gather(*(one() for _ in range(12))) == [200] * 12
    truth = sim.ground_truth()
    first_end = min(t.finished_s or 0.0 for t in truth)
    # 8 slots: at most 8 are scheduled before the first one ends, so at least 4 of the
    # 12 wait for a slot (more where a busy client sent them late).
    waited = sum(1 for t in truth if (t.scheduled_s or 0.0) >= first_end)
    assert 4 <= waited <= 12 and len(truth) - waited <= 8, waited


@pytest.mark.parametrize(
    ("raw", "status", "message"),
    [
        (b"{not json", 400, "not valid JSON"),
        (b'{"messages": []}', 400, "non-empty list"),
        (b'{"messages": [{"role": "user", "content": "x"}], "max_tokens": "9"}', 400, "integer"),
        (
            b'{"messages": [{"role": "user", "content": "x"}], "max_tokens": 9000}',
            400,
            "context length",
        ),
        (b'{"model": "gpt-9", "messages": [{"role": "user", "content": "x"}]}', 404, "gpt-9"),
    ],
)
async def test_bad_requests_get_clear_errors(
    sim_factory: StartSim, raw: bytes, status: int, message: str
) -> None:
    sim = await sim_factory(VLLM, time_scale=0.01)
    async with (
        aiohttp.ClientSession() as s,
        s.post(sim.url + "/v1/chat/completions", data=raw) as r,
    ):
        assert r.status == status
        assert message in (await r.json())["error"]["message"]
    # The engine still serves afterwards.
    client = openai.AsyncOpenAI(base_url=sim.url + "/v1", api_key="none", max_retries=0)
    done = await client.chat.completions.create(
        model=sim.profile.model, messages=CHAT, max_tokens=3
    )  # type: ignore[arg-type]
    assert done.usage is not None and done.usage.completion_tokens == 3
    await client.close()


@pytest.mark.parametrize("profile", ["h100-llama2-7b-llamacpp", "h100-llama2-7b-vllm"])
async def test_a_stopped_simulator_is_freed_with_its_metrics(profile: str) -> None:
    """An agent starts and stops simulators all day (the demo, the soak): a stopped one
    must leave memory, its metrics and traces with it. The soak found them kept: aiohttp
    caches each middleware chain with its handler and app for the life of the process,
    and the loading gate was a middleware closing over the simulator."""
    sim = await start_sim(profile, host="127.0.0.1", port=0, time_scale=0.02)
    await sim.wait_ready()
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "stream": True}
    async with aiohttp.ClientSession() as http:
        for path in ("/v1/models", sim.profile.spec.health_path, sim.profile.spec.metrics_path):
            async with http.get(sim.url + str(path)) as resp:
                assert resp.status == 200
        async with http.post(sim.url + "/v1/chat/completions", json=body) as resp:
            assert resp.status == 200
            await resp.read()
    server = weakref.ref(sim.server)
    await sim.stop()
    del sim
    gc.collect()
    assert server() is None, [type(r).__name__ for r in gc.get_referrers(server())]
