"""The llama.cpp adapter against the real llama-server container.

More streams than ``-np`` slots: the merged sample must show the slots busy,
the rest deferred, and generation progress that grows while streams are open
(its token counters only move when a request ends, so /slots must carry it).
"""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

import aiohttp
import pytest

from compose import compose_file
from engines.catalog import (
    Health,
    LaunchConfig,
    env_file_text,
    get_spec,
    merge_llamacpp,
    parse_llamacpp_slots,
)
from engines.sample import EngineSample
from tests.conftest import Rig
from tests.ports import free_port
from tests.waiting import apoll_until

pytestmark = pytest.mark.docker

SLOTS = 2
STREAMS = 5
MAX_TOKENS = 6000  # the tiny model decodes ~1000 tok/s: streams must outlast the scrapes


async def wait_ready(session: aiohttp.ClientSession, base: str, timeout_s: float = 90) -> None:
    spec = get_spec("llamacpp")

    async def health() -> Health:
        try:
            async with session.get(base + spec.health_path) as r:
                return spec.classify_health(r.status, await r.read())
        except aiohttp.ClientConnectionError:
            return spec.classify_health(None, None)

    await apoll_until(
        health, "llama-server to be ready", done=lambda h: h is Health.READY, timeout_s=timeout_s
    )


async def scrape(session: aiohttp.ClientSession, base: str) -> EngineSample:
    spec = get_spec("llamacpp")
    async with session.get(base + str(spec.metrics_path)) as r:
        assert r.status == 200
        metrics = spec.parse_metrics(await r.read())
    async with session.get(base + "/slots") as r:
        assert r.status == 200
        slots = parse_llamacpp_slots(await r.read())
    return merge_llamacpp(metrics, slots)


async def stream(session: aiohttp.ClientSession, base: str, n: int) -> int:
    body = {
        "model": "tiny",
        "messages": [{"role": "user", "content": f"Stream number {n}: tell a long story."}],
        "stream": True,
        **(get_spec("llamacpp").exact_length_fields(MAX_TOKENS) or {}),
    }
    chunks = 0
    async with session.post(base + "/v1/chat/completions", json=body) as r:
        assert r.status == 200
        async for line in r.content:
            if line.startswith(b"data: {"):
                chunks += 1
    return chunks


async def test_running_waiting_and_live_progress_under_more_streams_than_slots(
    rig: Rig, compose_project: str, tmp_path: Path
) -> None:
    spec = get_spec("llamacpp")
    port = free_port()
    cfg = LaunchConfig(
        model="/models/tiny.gguf", port=port, context_len=8192, max_num_seqs=SLOTS,
        image=rig.llama_image,
    )  # fmt: skip
    env = spec.compose_env(cfg, deployment_id=compose_project, node="test", platform="cpu")
    env_path = tmp_path / "engine.env"
    env_path.write_text(env_file_text(env))
    await asyncio.to_thread(
        subprocess.run,
        [*rig.compose, "-f", str(compose_file(spec.compose_name("cpu"))), "-p", compose_project,
         "--env-file", str(env_path), "up", "-d"],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    # llama-server closes the connection after a stream: no keep-alive reuse
    connector = aiohttp.TCPConnector(force_close=True)
    async with aiohttp.ClientSession(
        connector=connector, timeout=aiohttp.ClientTimeout(total=300)
    ) as session:
        await wait_ready(session, base)
        idle = await scrape(session, base)
        assert (idle.requests_running, idle.requests_waiting) == (0.0, 0.0)
        assert idle.kv_cache_usage == 0.0 and idle.kv_cache_usage_is_estimate

        tasks = [asyncio.create_task(stream(session, base, i)) for i in range(STREAMS)]
        # All five requests reach the server within moments, but not at once:
        # look until the load has fully arrived (or give up), streams still open.
        # A stream that ends stops the wait too: the assertions below say why.
        first = await apoll_until(
            lambda: scrape(session, base),
            "every stream to reach the server",
            done=lambda s: (
                (s.requests_running, s.requests_waiting) == (SLOTS, STREAMS - SLOTS)
                or any(t.done() for t in tasks)
            ),
        )
        second = await apoll_until(
            lambda: scrape(session, base),
            "generation in flight to move on",
            done=lambda s: (
                (s.generation_tokens_in_flight or 0) > (first.generation_tokens_in_flight or 0)
                or any(t.done() for t in tasks)
            ),
        )
        finished_early = sum(t.done() for t in tasks)

        assert finished_early == 0, "streams ended before the scrapes: raise MAX_TOKENS"
        assert first.requests_running == SLOTS
        assert first.requests_waiting == STREAMS - SLOTS
        assert first.generation_tokens_in_flight is not None
        assert second.generation_tokens_in_flight is not None
        assert second.generation_tokens_in_flight > first.generation_tokens_in_flight >= 0
        # the server-side counter has not moved: no request has ended yet
        assert second.generation_tokens_total == idle.generation_tokens_total
        assert second.kv_cache_usage is not None and second.kv_cache_usage > 0
        assert second.kv_cache_usage_is_estimate

        for task in tasks:  # enough seen: stop the load instead of waiting it out
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
