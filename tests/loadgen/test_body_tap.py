"""A streamed answer's body is taken where its bytes arrive (loadgen.arrival.BodyTap):
the request's task is not woken per chunk, and the aiohttp behaviour this relies on
(the connector's protocol factory, the synchronous parse in ``data_received``) is pinned
here so that an aiohttp upgrade that changes it fails loudly."""

from __future__ import annotations

import asyncio
import json
import types
from collections.abc import Awaitable, Callable, Coroutine, Generator
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from loadgen.arrival import BodyTap, StampingHandler, stamping
from loadgen.openai_stream import ClientLimits, StreamClient, StreamState, build_body
from loadgen.sse import SseSink
from tests.loadgen.conftest import Handler

CHUNKS = 100
PACE_S = 0.002
"""The stand-in's pace between chunks, so that they arrive in reads of their own."""
MOST_TASK_STEPS = 20
"""Steps a request's task may take whatever the answer's length: connect, send, the
head, the end (a handful each); one per chunk would be over a hundred."""


def _event(obj: object) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


TOKEN = _event({"choices": [{"index": 0, "delta": {"content": " t"}}]})
FINISH = _event({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]})


class _Steps(Coroutine[Any, Any, None]):
    """A coroutine that counts how often its task resumed it."""

    def __init__(self, inner: Coroutine[Any, Any, None]) -> None:
        self.inner = inner
        self.steps = 0

    def send(self, value: Any) -> Any:
        self.steps += 1
        return self.inner.send(value)

    def throw(self, *args: Any) -> Any:
        self.steps += 1
        return self.inner.throw(*args)

    def close(self) -> None:
        self.inner.close()

    def __await__(self) -> Generator[Any, None, None]:
        return self.inner.__await__()


async def test_a_long_answer_does_not_wake_the_requests_task_per_chunk(
    serve: Callable[[Handler], Awaitable[str]],
) -> None:
    async def paced(request: web.Request) -> web.StreamResponse:
        await request.read()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for _ in range(CHUNKS):
            await resp.write(TOKEN)
            await asyncio.sleep(PACE_S)
        await resp.write(FINISH + b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    url = await serve(paced)
    body = build_body(model="m", prompt="hi", max_tokens=CHUNKS, chat=True, include_usage=True)
    state = StreamState()
    async with StreamClient(ClientLimits(concurrency=1)) as client:
        counted = _Steps(client.stream(url + "/v1/chat/completions", body, state))
        await asyncio.wait_for(asyncio.ensure_future(counted), 60)
    assert state.error_kind is None, state.error_message
    assert len(state.chunk_perf) == CHUNKS and state.done
    assert counted.steps <= MOST_TASK_STEPS, f"{counted.steps} task steps for {CHUNKS} chunks"


class _Transport(asyncio.Transport):
    paused = False

    def write(self, data: Any) -> None:
        pass

    def is_closing(self) -> bool:
        return False

    def pause_reading(self) -> None:
        self.paused = True


async def _tapped(
    stall_s: float, read_bufsize: int = 2**20
) -> tuple[StampingHandler, StreamState, BodyTap]:
    """A connection that got a streamed answer's head, its body tapped as the client does."""
    proto = StampingHandler(asyncio.get_running_loop())
    proto.connection_made(_Transport())
    proto.set_response_params(read_bufsize=read_bufsize, read_timeout=stall_s)
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n"
    proto.data_received(head + b"\r\n")
    _, reader = await proto.read()
    resp = types.SimpleNamespace(content=reader, connection=types.SimpleNamespace(protocol=proto))
    state = StreamState()
    tap = BodyTap(resp, SseSink(state, 2**20).feed, stall_s)  # type: ignore[arg-type]
    return proto, state, tap


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


async def test_aiohttp_hands_the_body_over_inside_data_received(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # What BodyTap relies on: data_received parses the HTTP framing and calls the
    # response's reader's feed_data per chunk before it returns (if an aiohttp release
    # defers that, the events below are not taken without an await); the reader's class
    # can be swapped; its per-chunk bookkeeping stays bounded when nothing is buffered
    # (else it would pause the connection, here after 64 chunks); and a protocol whose
    # read_timeout is None arms no stall timer per read (the tap checks for stalls).
    proto, state, tap = await _tapped(60.0, read_bufsize=1024)
    assert proto.tap is tap
    timers: list[float] = []
    loop = asyncio.get_running_loop()
    arm = loop.call_later

    def counted(delay: float, *args: Any) -> asyncio.TimerHandle:
        timers.append(delay)
        return arm(delay, *args)

    monkeypatch.setattr(loop, "call_later", counted)
    for n in range(1, 301):
        proto.data_received(_chunk(TOKEN))
        assert len(state.chunk_perf) == n  # taken at once, no await in between
    assert timers == []  # no timer re-armed per read
    assert proto.transport is not None and not proto.transport.paused  # type: ignore[attr-defined]
    proto.data_received(_chunk(FINISH + b"data: [DONE]\n\n") + b"0\r\n\r\n")
    assert state.done and state.finish_reason == "length"
    assert proto.tap is None  # the body ended: the connection is free for the next request
    await asyncio.wait_for(tap.wait_end(), 5)


async def test_a_stall_after_the_body_began_is_a_timeout() -> None:
    # After a read that came once the body was tapped, aiohttp's own stall timer is off
    # (read_timeout None): only the tap's check can end the wait.
    proto, state, tap = await _tapped(0.2)
    proto.data_received(_chunk(TOKEN))
    with pytest.raises(aiohttp.ServerTimeoutError):
        await asyncio.wait_for(tap.wait_end(), 30)
    assert len(state.chunk_perf) == 1  # what came before the stall is kept
    assert proto.tap is None


async def test_the_session_builds_stamping_connections() -> None:
    connector = stamping(aiohttp.TCPConnector())
    try:
        assert connector._factory().__class__ is StampingHandler
    finally:
        await connector.close()
