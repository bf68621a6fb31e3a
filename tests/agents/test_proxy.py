"""The agent's engine proxy on loopback, with simulated engines: an engine's own API through
``/v1/engines/{id}/proxy/...`` with the agent's token, streamed; never another host.
The multi-host proof (a real llama-server on another node) is tests/fleet/."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import psutil
import pytest
from yarl import URL

from agents import relay as agent_relay
from agents.client import AgentClient
from agents.config import AgentConfig
from agents.embedded import embedded_agent
from tests.agents.standin_engine import blob_bytes
from tests.agents.test_engine_faults import STANDIN, engines_killed_afterwards

from .conftest import TOKEN

AUTH = {"Authorization": f"Bearer {TOKEN}"}
CHAT = {
    "model": "m",
    "messages": [{"role": "user", "content": "hi"}],
    "max_tokens": 8,
    "stream": True,
    "stream_options": {"include_usage": True},
}


def _agent_ports(engine_url: str) -> set[int]:
    """Local ports of this process's (the embedded agent's) connections to the engine."""
    port = URL(engine_url).port
    return {c.laddr.port for c in psutil.Process().net_connections("tcp")
            if c.raddr and c.raddr.port == port}  # fmt: skip


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


@contextlib.asynccontextmanager
async def _standin(
    make_config: Callable[..., AgentConfig], tmp_path: Path, kind: str
) -> AsyncIterator[tuple[str, str]]:
    """An agent with the stand-in engine started as ``kind``: the proxy's URL and the
    engine's own."""
    wrapper = tmp_path / "standin"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{STANDIN}" "$@"\n')
    wrapper.chmod(0o755)
    (tmp_path / "engines" / "model").mkdir(parents=True)
    config = make_config(native_binaries={kind: wrapper}, model_dirs=(tmp_path / "engines",))
    with engines_killed_afterwards(config.state_dir, str(STANDIN)):
        async with embedded_agent(config) as (url, token), AgentClient(url, token) as client:
            model = str(tmp_path / "engines" / "model")
            engine = await client.start(kind, {"model": model}, runtime="process")
            assert engine.url is not None
            yield f"{url}/v1/engines/{engine.id}/proxy", engine.url
            await client.stop(engine.id)


@pytest.mark.parametrize(("kind", "connections"), [("vllm", 1), ("llamacpp", 6)])
async def test_the_proxy_keeps_its_engine_connections_where_the_engine_does(
    make_config: Callable[..., AgentConfig], tmp_path: Path, kind: str, connections: int
) -> None:
    """A connect per request is most of what the proxy adds on a busy node
    (benchmarks/proxy_bench.py): an engine that keeps connections alive (vLLM) gets its one
    connection back for each answer; llama-server, which closes its connection after every
    streamed answer, still gets a fresh one each time."""
    async with _standin(make_config, tmp_path, kind) as (proxy, engine):
        async with aiohttp.ClientSession(headers=AUTH) as http:
            for _ in range(6):
                async with http.post(f"{proxy}/v1/chat/completions", json=CHAT) as resp:
                    assert resp.status == 200, await resp.text()
                    choices = [c["choices"] for c in await sse_chunks(resp)]
                assert choices == [[{"index": 0, "delta": {"content": text}}] for text in "ab"]
            async with http.get(f"{engine}/peers") as resp:
                peers = await resp.json()
    assert len(peers) == 6 and len(set(peers)) == connections, peers


async def test_a_connection_to_llama_server_is_opened_before_the_request_that_takes_it(
    make_config: Callable[..., AgentConfig], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """llama-server closes its connection after every streamed answer, so each proxied
    request needs a new one; the proxy opens it ahead, so the connect is not in the
    request's path (benchmarks/proxy_bench.py): the connection that carries the second
    request was accepted by the engine before the client sent that request."""
    monkeypatch.setattr(agent_relay, "SPARE_MAX_AGE_S", 120.0)  # a slow machine's pause
    async with _standin(make_config, tmp_path, "llamacpp") as (proxy, engine):
        chat = f"{proxy}/v1/chat/completions"
        async with aiohttp.ClientSession(headers=AUTH) as http:

            async def engine_says(route: str) -> Any:
                async with http.get(f"{engine}{route}") as resp:
                    return await resp.json()

            async with http.post(chat, json=CHAT) as resp:
                assert len(await sse_chunks(resp)) == 2
            # the spare: a connection of the agent's that carried no request, seen
            # twice (a scrape's connection is also unused for a moment)
            seen: set[int] = set()
            async with asyncio.timeout(30):
                while True:
                    state = await engine_says("/opened")
                    idle = {int(p) for p in state["opened"]} - set(state["served"])
                    spare = idle & _agent_ports(engine)
                    if spare & seen:
                        break
                    seen = spare
                    await asyncio.sleep(0.05)  # polled: the engine posts no event
            sent_at = time.monotonic()
            async with http.post(chat, json=CHAT) as resp:
                assert len(await sse_chunks(resp)) == 2
            second = (await engine_says("/peers"))[-1]
            opened = (await engine_says("/opened"))["opened"][str(second)]
    assert opened < sent_at, f"request 2's connection opened {opened - sent_at:+.4f} s after it"


@pytest.mark.parametrize("kind", ["vllm", "llamacpp"])
async def test_an_answer_arrives_whole_however_the_engine_frames_it(
    make_config: Callable[..., AgentConfig], tmp_path: Path, kind: str
) -> None:
    """Chunks, a length, or an end that is the engine's close (re-framed as chunks, so the
    client's connection to the agent stays open): the same bytes, twice in a row on one
    client connection."""
    size = 300_001
    async with _standin(make_config, tmp_path, kind) as (proxy, _engine):
        async with aiohttp.ClientSession(headers=AUTH) as http:
            for framing in ("chunked", "length", "close", "chunked", "close", "length"):
                blob = f"{proxy}/blob?bytes={size}&framing={framing}"
                async with http.get(blob) as resp:
                    assert resp.status == 200, await resp.text()
                    body = await resp.read()
                    sized = resp.headers.get("Content-Length")
                assert body == blob_bytes(size), framing
                assert sized == (str(size) if framing == "length" else None)
            assert len(http.connector._conns) == 1  # type: ignore[union-attr]  # one, reused


async def test_a_client_that_reads_slowly_holds_the_engine_back_not_the_agents_memory(
    make_config: Callable[..., AgentConfig], tmp_path: Path
) -> None:
    """Back-pressure: while the client reads nothing, the engine's writes stop once the
    sockets' buffers between them are full (far short of the answer: the agent does not
    take it all in), and go on as the client reads; nothing lost or repeated."""
    size = 96 * 1024 * 1024
    async with _standin(make_config, tmp_path, "vllm") as (proxy, engine):
        async with aiohttp.ClientSession(headers=AUTH) as http:
            resp = await http.get(f"{proxy}/blob?bytes={size}&framing=chunked")
            assert resp.status == 200
            first = await resp.content.readexactly(1024)

            async def written() -> int:
                async with http.get(f"{engine}/written") as w:
                    return int(await w.json())

            # polled: the engine's socket filling posts no event; stalled = the same count
            # over a second
            counts = [await written()]
            async with asyncio.timeout(60):
                while len(counts) < 11 or counts[-1] != counts[-11]:
                    await asyncio.sleep(0.1)
                    counts.append(await written())
            stalled_at = counts[-1]
            rest = await asyncio.wait_for(resp.content.read(), 120)
            resp.release()
    assert stalled_at < size // 2, f"the engine wrote {stalled_at} of {size} bytes unread"
    assert first + rest == blob_bytes(size)
