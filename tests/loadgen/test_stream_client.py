"""The streaming client against real HTTP servers replaying real and broken streams."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from aiohttp import web

from loadgen.openai_stream import (
    ClientLimits,
    StreamClient,
    StreamState,
    build_body,
    endpoint_url,
)
from runs.records import ErrorKind
from tests.loadgen.conftest import Handler

CPU_BOUND_S = 5.0
"""CPU seconds a 48 MiB line may cost: linear is well under one, quadratic is minutes."""


def _sse_handler(payload: bytes, *, split_every: int | None = None) -> Handler:
    async def handler(request: web.Request) -> web.StreamResponse:
        await request.read()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        step = split_every or len(payload)
        for i in range(0, len(payload), step):  # arbitrary TCP-like fragmentation
            await resp.write(payload[i : i + step])
        await resp.write_eof()
        return resp

    return handler


async def _one(url: str, **limits: float) -> StreamState:
    body = build_body(model="m", prompt="hi", max_tokens=8, chat=True, include_usage=True)
    state = StreamState()
    async with StreamClient(ClientLimits(concurrency=1, **limits)) as client:  # type: ignore[arg-type]
        await client.stream(endpoint_url(url, chat=True), body, state, request_id="t-0-0")
    return state


@pytest.mark.parametrize("split_every", [None, 7])
async def test_real_llama_server_stream_is_measured_and_counted(
    serve: Callable[[Handler], Awaitable[str]], fixtures_dir: Path, split_every: int | None
) -> None:
    payload = (fixtures_dir / "llamacpp-live" / "chat-stream-with-usage.txt").read_bytes()
    url = await serve(_sse_handler(payload, split_every=split_every))
    state = await _one(url)
    assert state.error_kind is None, state.error_message
    # The capture: a role-only chunk, 8 content chunks, finish, usage (8 / 57), [DONE].
    assert len(state.chunk_perf) == 8
    assert state.usage_completion_tokens == 8
    assert state.usage_prompt_tokens == 57
    assert state.finish_reason == "length" and state.done
    assert state.server_decode_tok_s == pytest.approx(1909.438, rel=1e-4)


async def test_role_only_and_usage_chunks_never_count_as_tokens(
    serve: Callable[[Handler], Awaitable[str]],
) -> None:
    role = {"choices": [{"index": 0, "delta": {"role": "assistant", "content": None}}]}
    empty = {"choices": [{"index": 0, "delta": {"content": ""}}]}
    usage = {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 0}}
    payload = b"".join(b"data: " + json.dumps(o).encode() + b"\n\n" for o in (role, empty, usage))
    url = await serve(_sse_handler(payload + b"data: [DONE]\n\n"))
    state = await _one(url)
    assert state.chunk_perf == []
    assert state.error_kind is ErrorKind.NO_CONTENT


async def test_a_single_line_far_beyond_64kb_is_read(
    serve: Callable[[Handler], Awaitable[str]],
) -> None:
    # aiohttp's 64 KB line default broke vLLM's benchmark at 50k-token contexts.
    big = {"choices": [{"index": 0, "delta": {"content": "x" * 600_000}}]}
    done = {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
    payload = b"".join(b"data: " + json.dumps(o).encode() + b"\n\n" for o in (big, done))
    url = await serve(_sse_handler(payload, split_every=65_536))
    state = await _one(url)
    assert state.error_kind is None, state.error_message
    assert len(state.chunk_perf) == 1


def _events(*objs: object) -> bytes:
    return b"".join(b"data: " + json.dumps(o).encode() + b"\n\n" for o in objs) + (
        b"data: [DONE]\n\n"
    )


CONTENT = {"choices": [{"index": 0, "delta": {"content": "a"}}]}
FINISH = {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        ({"usage": {"prompt_tokens": 3, "completion_tokens": 10**40}}, "completion_tokens"),
        ({"usage": {"prompt_tokens": -5, "completion_tokens": 1}}, "prompt_tokens = -5"),
        ({"usage": {"prompt_tokens": 3, "completion_tokens": 1.5}}, "completion_tokens = 1.5"),
        ({"usage": {"prompt_tokens": True, "completion_tokens": 1}}, "prompt_tokens = True"),
        ({"usage": {"prompt_tokens": "3", "completion_tokens": 1}}, "prompt_tokens = '3'"),
        ({"timings": {"predicted_per_second": -2.0}}, "predicted_per_second = -2.0"),
    ],
    ids=["huge", "negative", "fraction", "bool", "string", "negative-speed"],
)
async def test_impossible_values_fail_the_request_as_a_protocol_error(
    serve: Callable[[Handler], Awaitable[str]], extra: dict[str, object], words: str
) -> None:
    usage_chunk = {"choices": [], **extra}
    url = await serve(_sse_handler(_events(CONTENT, FINISH, usage_chunk)))
    state = await _one(url)
    assert state.error_kind is ErrorKind.PROTOCOL
    assert state.error_message is not None and words in state.error_message
    assert state.usage_completion_tokens is None or state.usage_completion_tokens >= 0


async def test_null_and_largest_possible_counts_are_accepted(
    serve: Callable[[Handler], Awaitable[str]],
) -> None:
    usage_chunk = {"choices": [], "usage": {"prompt_tokens": None, "completion_tokens": 2**63 - 1}}
    state = await _one(await serve(_sse_handler(_events(CONTENT, FINISH, usage_chunk))))
    assert state.error_kind is None, state.error_message
    assert (state.usage_prompt_tokens, state.usage_completion_tokens) == (None, 2**63 - 1)


async def test_an_endless_sse_line_fails_fast_as_a_protocol_error(
    serve: Callable[[Handler], Awaitable[str]],
) -> None:
    hung_up = asyncio.Event()

    async def handler(request: web.Request) -> web.StreamResponse:
        """One 48 MiB SSE line and no newline, 1 MiB a write."""
        await request.read()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        piece = b"x" * (1 << 20)
        try:
            await resp.write(b"data: ")
            for _ in range(48):
                await resp.write(piece)
            await resp.write_eof()
        except ConnectionError:
            hung_up.set()  # the client closed the connection on the line, as it should
        return resp

    url = await serve(handler)
    cpu0 = time.process_time()
    state = await _one(url, request_timeout_s=60.0)
    # A guard against the quadratic read (118 s of CPU for 48 MiB), not a tight timing:
    # this process's CPU time (the server's and the client's), which other load on the
    # machine does not stretch as it does the wall clock (5 s on a busy 2-core box).
    assert time.process_time() - cpu0 < CPU_BOUND_S
    assert state.error_kind is ErrorKind.PROTOCOL, state.error_message
    assert state.error_message is not None
    assert "longer than 1,048,576 bytes" in state.error_message
    assert "connection was closed" in state.error_message
    await asyncio.wait_for(hung_up.wait(), timeout=10.0)


async def test_a_48_mib_line_under_a_raised_limit_is_read_in_linear_time(
    serve: Callable[[Handler], Awaitable[str]],
) -> None:
    head = b'data: {"choices":[{"index":0,"delta":{"content":"'
    tail = b'"}}]}\n\n' + _events(FINISH)

    async def handler(request: web.Request) -> web.StreamResponse:
        await request.read()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        piece = b"x" * (64 << 10)  # arrives in many reads: the split-line path
        await resp.write(head)
        for _ in range(48 * 16):
            await resp.write(piece)
        await resp.write(tail)
        await resp.write_eof()
        return resp

    url = await serve(handler)
    cpu0 = time.process_time()
    state = await _one(url, request_timeout_s=60.0, max_line_bytes=64 << 20)
    assert time.process_time() - cpu0 < CPU_BOUND_S
    assert state.error_kind is None, state.error_message
    assert len(state.chunk_perf) == 1 and state.finish_reason == "stop"


@pytest.mark.parametrize(
    ("payload", "kind", "words"),
    [
        (b"data: {not json\n\n", ErrorKind.PROTOCOL, "malformed SSE JSON"),
        (
            b'data: {"choices":[{"index":0,"delta":{"content":"a"}}]}\n\n',
            ErrorKind.BROKEN_STREAM,
            "without [DONE]",
        ),
        (b'data: {"error":{"message":"KV cache full"}}\n\n', ErrorKind.ENGINE_ERROR, "KV cache"),
        (b": ping\n\n", ErrorKind.BROKEN_STREAM, "without [DONE]"),
    ],
)
async def test_broken_streams_are_failures_with_a_reason(
    serve: Callable[[Handler], Awaitable[str]], payload: bytes, kind: ErrorKind, words: str
) -> None:
    url = await serve(_sse_handler(payload))
    state = await _one(url)
    assert state.error_kind is kind
    assert state.error_message is not None and words in state.error_message


async def test_http_error_keeps_status_and_body(
    serve: Callable[[Handler], Awaitable[str]],
) -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        return web.json_response({"error": "model not loaded"}, status=503)

    state = await _one(await serve(handler))
    assert state.error_kind is ErrorKind.HTTP_STATUS
    assert state.http_status == 503
    assert state.error_message is not None and "model not loaded" in state.error_message


async def test_nothing_listening_is_a_connect_failure(unused_tcp_port: int) -> None:
    state = await _one(f"http://127.0.0.1:{unused_tcp_port}")
    assert state.error_kind is ErrorKind.CONNECT
    assert not state.chunk_perf


def test_endpoint_url_accepts_bases_with_or_without_v1() -> None:
    assert endpoint_url("http://h:1", True) == "http://h:1/v1/chat/completions"
    assert endpoint_url("http://h:1/v1/", False) == "http://h:1/v1/completions"
