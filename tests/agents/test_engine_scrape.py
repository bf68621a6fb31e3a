"""Engine scrapes against real HTTP servers: recorded llama-server payloads become
rates; garbage or a dead engine become n/a, never 0 and never an exception."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from agents.catalog_adapter import get_spec
from agents.collectors.engines import EngineScraper
from agents.runtime import Deployment
from tests.waiting import apoll_until


@pytest.fixture
async def engine_server(fixtures_dir: Path) -> AsyncIterator[tuple[str, dict[str, bytes]]]:
    """A real HTTP server answering with whatever the test puts in ``payloads``."""
    live = fixtures_dir / "llamacpp-live"
    payloads = {
        "/metrics": (live / "metrics-idle.txt").read_bytes(),
        "/slots": (live / "slots-idle.json").read_bytes(),
    }

    async def serve(request: web.Request) -> web.Response:
        return web.Response(body=payloads[request.path], content_type="text/plain")

    app = web.Application()
    app.router.add_get("/metrics", serve)
    app.router.add_get("/slots", serve)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    yield f"http://127.0.0.1:{runner.addresses[0][1]}", payloads
    await runner.cleanup()


def dep_for(url: str) -> Deployment:
    port = int(url.rsplit(":", 1)[1])
    return Deployment(
        id="e1",
        kind="llamacpp",
        runtime="compose",
        config={},
        port=port,
        state="ready",
        health="healthy",
    )


async def test_recorded_llama_server_payloads_become_a_sample(
    engine_server: tuple[str, dict[str, bytes]], fixtures_dir: Path
) -> None:
    url, payloads = engine_server
    live = fixtures_dir / "llamacpp-live"
    dep, spec = dep_for(url), get_spec("llamacpp")
    async with aiohttp.ClientSession() as http:
        scraper = EngineScraper(http)
        first = scraper.telemetry(dep, await scraper.sample(dep, spec))
        assert first.requests_running == 0 and first.generation_tok_s is None  # no rate yet
        payloads["/metrics"] = (live / "metrics-under-load.txt").read_bytes()
        payloads["/slots"] = (live / "slots-busy.json").read_bytes()
        second = scraper.telemetry(dep, await scraper.sample(dep, spec))
    assert second.requests_running is not None and second.requests_running >= 1
    assert second.kv_cache_usage is not None and second.kv_cache_usage_is_estimate
    assert second.generation_tok_s is not None and second.generation_tok_s > 0


async def test_garbage_and_dead_engines_read_as_not_available(
    engine_server: tuple[str, dict[str, bytes]],
) -> None:
    url, payloads = engine_server
    payloads["/metrics"] = b"\x00\xff this is not prometheus {{{"
    dep, spec = dep_for(url), get_spec("llamacpp")
    async with aiohttp.ClientSession() as http:
        scraper = EngineScraper(http)
        garbage = await scraper.sample(dep, spec)
        dead = Deployment(id="e2", kind="llamacpp", runtime="compose", config={}, port=1)
        refused = await scraper.sample(dead, spec)
        telemetry = scraper.telemetry(dep, garbage)
    assert garbage.sample is None and garbage.error and "not UTF-8" in garbage.error
    assert refused.sample is None and refused.error and "GET /metrics" in refused.error
    assert telemetry.kv_cache_usage is None and telemetry.requests_running is None
    assert telemetry.scrape_error == garbage.error
    assert telemetry.state == "ready"  # the engine's state is not guessed from one scrape


async def test_a_page_slower_than_the_deadline_reaches_the_next_frame(
    fixtures_dir: Path,
) -> None:
    """An engine busy enough to answer after the scrape deadline (vLLM's API server on
    a loaded CPU box) must still show its numbers: the frame that gave up says so, and
    the next one takes the page that came late instead of starting over and missing
    again, frame after frame."""
    page = (fixtures_dir / "llamacpp-live" / "metrics-under-load.txt").read_bytes()
    answered = asyncio.Event()

    async def slow(request: web.Request) -> web.Response:
        await asyncio.sleep(0.3)  # past the 0.1 s deadline below, every time
        answered.set()
        return web.Response(body=page, content_type="text/plain")

    app = web.Application()
    app.router.add_get("/metrics", slow)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    dep = dep_for(f"http://127.0.0.1:{runner.addresses[0][1]}")
    spec = get_spec("llamacpp")
    try:
        async with aiohttp.ClientSession() as http:
            scraper = EngineScraper(http, timeout_s=0.1)
            missed = await scraper.sample(dep, spec)
            assert missed.sample is None and missed.error is not None
            assert "no complete scrape within 0.1 s" in missed.error
            await asyncio.wait_for(answered.wait(), 10)
            # The page that came late: a busy box may still be reading or parsing it past
            # the next frame's 0.1 s, so frames are asked until one has it. One that
            # started over would miss every time (the page takes 0.3 s).
            late = await apoll_until(
                lambda: scraper.sample(dep, spec),
                "a frame with the page that came late",
                done=lambda scrape: scrape.error is None,
                timeout_s=30,
            )
            assert late.sample is not None
            assert (scraper.telemetry(dep, late).requests_running or 0) >= 1
            await scraper.close()
    finally:
        await runner.cleanup()


async def test_an_engine_stopped_while_its_page_is_awaited_ends_only_its_scrape() -> None:
    """The engine is stopped (``forget``) while the frame waits for its metrics page: the
    frame gets "no sample" for it. The cancelled scrape's CancelledError used to escape
    into the frame, which ended the agent's sampler: no frame ever after, on any screen."""
    asked, never = asyncio.Event(), asyncio.Event()

    async def hangs(request: web.Request) -> web.Response:
        asked.set()
        await never.wait()  # an engine busy past the frame's wait, then stopped
        return web.Response(text="")

    app = web.Application()
    app.router.add_get("/metrics", hangs)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    dep = dep_for(f"http://127.0.0.1:{runner.addresses[0][1]}")
    try:
        async with aiohttp.ClientSession() as http:
            scraper = EngineScraper(http, timeout_s=60)
            frame = asyncio.ensure_future(scraper.sample(dep, get_spec("llamacpp")))
            await asyncio.wait_for(asked.wait(), 30)
            scraper.forget(dep.id)  # the engine's stop, as the manager does it
            result = await asyncio.wait_for(frame, 30)
            assert result.sample is None and result.error is not None
            assert "the engine is stopping" in result.error
            await scraper.close()
    finally:
        never.set()
        await runner.cleanup()
