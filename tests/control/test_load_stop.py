"""Stopping a load test from the Load screen (``control.loads.until_stopped``) takes effect
at once, not at the run's next event: a run still sizing its prompts says nothing until its
engine's tokenizer answers (up to ``loadgen.sizing.TIMEOUT_S``), and a cancel that waited
for the next event let a run in its last level finish before the stop reached it."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from control.loads import until_stopped
from loadgen import ClosedLoop, LoadSpec, Target, Workload
from loadgen.sizing import TIMEOUT_S
from loadgen.subproc import run_load_in_subprocess
from runs.events import RunEvent, RunInterrupted

STOP_BOUND_S = TIMEOUT_S / 2
"""A bound on a hang, well under the sizing's own time-out (what a stop that waited
for the next event took)."""


class _Events:
    def __init__(self) -> None:
        self.seen: list[RunEvent] = []

    def on_event(self, event: RunEvent, /) -> None:
        self.seen.append(event)


@pytest.fixture
async def silent_tokenizer() -> AsyncIterator[tuple[str, asyncio.Event]]:
    """A llama.cpp stand-in on 127.0.0.1 whose ``/tokenize`` never answers; the event is
    set once the run asks it (the run is sizing its prompts)."""
    asked = asyncio.Event()
    hold = asyncio.Event()

    async def tokenize(_: web.Request) -> web.Response:
        asked.set()
        await hold.wait()
        return web.json_response({"tokens": []})

    app = web.Application()
    app.router.add_post("/tokenize", tokenize)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}", asked
    finally:
        hold.set()
        await runner.cleanup()


async def test_a_stop_ends_a_run_that_has_not_said_anything_yet(
    silent_tokenizer: tuple[str, asyncio.Event],
) -> None:
    url, asked = silent_tokenizer
    record, stop = _Events(), asyncio.Event()
    spec = LoadSpec((ClosedLoop(1),), requests_per_level=4)
    events = run_load_in_subprocess(
        spec, Workload(input_len=8, output_len=4), Target(url, "m", "llamacpp"), record=record
    )
    shown: list[object] = []

    async def follow() -> None:
        async with contextlib.aclosing(events):
            async for event in until_stopped(events, stop):
                shown.append(event)

    following = asyncio.create_task(follow())
    try:
        await asyncio.wait_for(asyncio.shield(asked.wait()), 60)  # the worker is sizing
        stop.set()
        await asyncio.wait_for(asyncio.shield(following), STOP_BOUND_S)
    finally:
        following.cancel()
        await asyncio.gather(following, return_exceptions=True)
    assert shown == []  # nothing came before the stop
    assert record.seen == [RunInterrupted("stopped by SIGTERM")], record.seen
