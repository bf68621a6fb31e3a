"""Chaos on the engine side (issue 22, docs/reliability.md): one stand-in engine that,
request by request, answers well, stalls without closing, keeps the socket alive with
comments only, answers garbage, answers 200 with its error (three spellings) and drops the
connection mid-stream. Each fault is its own failure kind, judged within the request
timeout, every request has a record, and the run goes on to its end."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from aiohttp import web

from loadgen import ClosedLoop, ErrorKind, LoadSpec, MemorySink, Target, Workload, run_load
from tests.loadgen.conftest import Handler

STALL_S = 1.0
REQUEST_TIMEOUT_S = 3.0
KEEP_ALIVE_S = STALL_S / 20
"""The trickle's comment interval: far inside the stall timeout, so a stand-in whose loop
(the test's own) is held up for most of a second by a busy machine still trickles, and
the trickle is judged by the request timeout, as meant."""


def _event(obj: object) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


ROLE = _event({"choices": [{"index": 0, "delta": {"role": "assistant"}}]})
CONTENT = _event({"choices": [{"index": 0, "delta": {"content": " tok"}}]})
FINISH = _event({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]})


async def _stream(request: web.Request, *parts: bytes) -> web.StreamResponse:
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    for part in parts:
        await resp.write(part)
    return resp


# What the stand-in does for request number n % len(PLAN), and the kind it must become.
PLAN: list[tuple[str, ErrorKind | None]] = [
    ("ok", None),
    ("stall", ErrorKind.TIMEOUT),
    ("trickle", ErrorKind.TIMEOUT),
    ("garbage", ErrorKind.PROTOCOL),
    ("garbage_event", ErrorKind.PROTOCOL),
    ("error_body", ErrorKind.ENGINE_ERROR),
    ("error_event", ErrorKind.ENGINE_ERROR),
    ("error_line", ErrorKind.ENGINE_ERROR),
    ("drop", ErrorKind.BROKEN_STREAM),
]


@pytest.fixture
async def faulty_engine(
    serve: Callable[[Handler], Awaitable[str]],
) -> AsyncIterator[str]:
    released = asyncio.Event()  # ends the stalled handlers when the test is done

    async def handler(request: web.Request) -> web.StreamResponse:
        await request.read()
        n = int(request.headers["X-Request-Id"].rsplit("-", 1)[1])
        fault = PLAN[n % len(PLAN)][0]
        if fault == "ok":
            resp = await _stream(request, ROLE, CONTENT, CONTENT, FINISH, b"data: [DONE]\n\n")
        elif fault == "stall":  # headers and a role chunk, then silence, socket open
            resp = await _stream(request, ROLE)
            await released.wait()
        elif fault == "trickle":  # keep-alive comments forever, never a token
            resp = await _stream(request, ROLE)
            while not released.is_set():
                await resp.write(b": keep-alive\n\n")
                await asyncio.sleep(KEEP_ALIVE_S)
        elif fault == "garbage":
            return web.Response(body=b"\x00\xff<html>oops</html>\n\n", content_type="text/plain")
        elif fault == "garbage_event":
            resp = await _stream(request, ROLE, b"data: {\x00\xfe nonsense\n\n")
        elif fault == "error_body":
            return web.json_response({"error": {"message": "out of KV cache", "code": 500}})
        elif fault == "error_event":
            resp = await _stream(request, ROLE, _event({"error": {"message": "out of KV cache"}}))
        elif fault == "error_line":  # llama.cpp's spelling of an error mid-stream
            resp = await _stream(request, ROLE, b'error: {"message": "out of KV cache"}\n\n')
        else:  # "drop": two tokens, then the connection is cut
            resp = await _stream(request, ROLE, CONTENT, CONTENT)
            assert request.transport is not None
            request.transport.close()
            return resp
        await resp.write_eof()
        return resp

    try:
        yield await serve(handler)
    finally:
        released.set()


async def test_each_engine_fault_is_its_own_kind_within_the_request_timeout(
    faulty_engine: str,
) -> None:
    rounds = 2
    n = rounds * len(PLAN)
    spec = LoadSpec(
        (ClosedLoop(len(PLAN)),),
        requests_per_level=n,
        stall_timeout_s=STALL_S,
        request_timeout_s=REQUEST_TIMEOUT_S,
    )
    sink = MemorySink()
    t0 = time.monotonic()
    result = await run_load(
        spec, Workload(input_len=4, output_len=2), Target(faulty_engine, "m"), sink, run_id="k"
    )
    elapsed_s = time.monotonic() - t0
    # Each round waits at most one request timeout (the trickle's): the faults never hang it.
    assert elapsed_s < rounds * REQUEST_TIMEOUT_S + 5, elapsed_s
    assert len(sink.records) == n  # every request has a record
    for r in sink.records:
        fault, kind = PLAN[r.request_index % len(PLAN)]
        assert r.error_kind is kind, (fault, r.error_kind, r.error_message)
        assert r.end_at is None or r.end_at - r.sent_at < REQUEST_TIMEOUT_S + 1, fault
        if kind is not None:
            assert r.error_message, fault
    words = {r.request_index % len(PLAN): r.error_message or "" for r in sink.records}
    names = [fault for fault, _ in PLAN]
    assert f"no byte for {STALL_S:g} s" in words[names.index("stall")]
    assert f"{REQUEST_TIMEOUT_S:g} s request timeout" in words[names.index("trickle")]
    for fault in ("error_body", "error_event", "error_line"):
        assert "out of KV cache" in words[names.index(fault)], fault
    assert "not an event stream" in words[names.index("garbage")]
    assert "malformed SSE JSON" in words[names.index("garbage_event")]
    (level,) = result.levels
    assert level.completed == rounds and level.failed == n - rounds
    assert level.failures_by_kind == {
        "timeout": 2 * rounds,
        "protocol": 2 * rounds,
        "engine_error": 3 * rounds,
        "broken_stream": rounds,
    }
