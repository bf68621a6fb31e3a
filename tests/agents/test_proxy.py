"""The agent's engine proxy on loopback, with simulated engines: an engine's own API through
``/v1/engines/{id}/proxy/...`` with the agent's token, streamed; never another host.
The multi-host proof (a real llama-server on another node) is tests/fleet/."""

from __future__ import annotations

import asyncio
import contextlib
import json

import aiohttp

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
