"""The agent's engine proxy on loopback, with simulated engines: an engine's own API through
``/v1/engines/{id}/proxy/...`` with the agent's token, streamed; never another host.
The multi-host proof (a real llama-server on another node) is tests/fleet/."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging

import aiohttp
import pytest

from agents.client import AgentClient

from .conftest import TOKEN

AUTH = {"Authorization": f"Bearer {TOKEN}"}
CHAT = {
    "model": "m",
    "messages": [{"role": "user", "content": "hi"}],
    "max_tokens": 8,
    "stream": True,
    "stream_options": {"include_usage": True},
}


async def sse_chunks(resp: aiohttp.ClientResponse) -> list[dict[str, object]]:
    chunks = []
    async for raw in resp.content:
        line = raw.decode().strip()
        if line.startswith("data: ") and line != "data: [DONE]":
            chunks.append(json.loads(line.removeprefix("data: ")))
    return chunks


async def test_the_proxy_streams_an_engines_answer_with_the_agents_token(
    agent: tuple[str, AgentClient],
) -> None:
    url, client = agent
    engine = await client.start("sim", {"profile": "h100-llama2-7b-vllm"})
    proxy = f"{url}/v1/engines/{engine.id}/proxy"
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{proxy}/v1/models", headers=AUTH) as resp:
            model = (await resp.json())["data"][0]["id"]
        chat = {**CHAT, "model": model}
        async with http.post(f"{proxy}/v1/chat/completions", json=chat, headers=AUTH) as resp:
            assert resp.status == 200 and resp.content_type == "text/event-stream"
            chunks = await sse_chunks(resp)
        async with http.post(f"{proxy}/v1/chat/completions", json=CHAT) as resp:
            assert resp.status == 401  # the agent's token, as on every other route
        async with http.get(f"{url}/v1/engines/nosuch/proxy/v1/models", headers=AUTH) as resp:
            assert resp.status == 404 and "nosuch" in (await resp.json())["error"]
        # A tail that looks like another host still goes to this engine: port 1 would
        # refuse (502), the engine answers for itself.
        async with http.get(f"{proxy}//127.0.0.1:1/v1/models", headers=AUTH) as resp:
            assert resp.status != 502, await resp.text()
    contents = [c for c in chunks if c.get("choices")]
    assert len(contents) >= 2
    assert chunks[-1]["usage"]["completion_tokens"] == 8  # type: ignore[index]
    await client.stop(engine.id)


async def test_an_engine_that_does_not_answer_is_a_502_in_words(
    agent: tuple[str, AgentClient],
) -> None:
    url, client = agent
    engine = await client.start(
        "sim", {"profile": "h100-llama2-7b-llamacpp", "faults": {"crash_after": 0}}
    )
    events = client.events()
    proxy = f"{url}/v1/engines/{engine.id}/proxy/v1/chat/completions"
    async with aiohttp.ClientSession() as http:
        with contextlib.suppress(aiohttp.ClientError):  # the engine dies under this one
            async with http.post(proxy, json=CHAT, headers=AUTH) as resp:
                await resp.read()
        crashed = await asyncio.wait_for(anext(events), timeout=10)
        await events.aclose()
        assert crashed.kind == "crashed"
        async with http.post(proxy, json=CHAT, headers=AUTH) as resp:
            assert resp.status == 502
            error = (await resp.json())["error"]
    assert f"engine {engine.id}" in error and "did not answer" in error
    await client.stop(engine.id)


async def test_proxied_requests_stay_out_of_the_access_log_unless_debugging(
    agent: tuple[str, AgentClient], caplog: pytest.LogCaptureFixture
) -> None:
    """A load test through the proxy sends thousands of requests a minute: a line each would
    flood the agent's log and cost it CPU on every request; DEBUG brings them back."""
    url, client = agent
    engine = await client.start("sim", {"profile": "h100-llama2-7b-vllm"})
    models = f"{url}/v1/engines/{engine.id}/proxy/v1/models"

    def access_lines() -> list[str]:
        return [r.getMessage() for r in caplog.records if r.name == "aiohttp.access"]

    async with aiohttp.ClientSession(headers=AUTH) as http:
        caplog.set_level(logging.INFO, logger="aiohttp.access")
        for route in (models, f"{url}/v1/engines"):
            async with http.get(route) as resp:
                assert resp.status == 200
        assert any("GET /v1/engines " in line for line in access_lines()), access_lines()
        assert not any("/proxy/" in line for line in access_lines()), access_lines()

        caplog.set_level(logging.DEBUG, logger="aiohttp.access")
        async with http.get(models) as resp:
            assert resp.status == 200
        assert any("/proxy/v1/models" in line for line in access_lines()), access_lines()
    await client.stop(engine.id)
