"""The streaming client against real HTTP servers replaying real and broken streams."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
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

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@pytest.fixture
async def serve() -> AsyncIterator[Callable[[Handler], Awaitable[str]]]:
    runners: list[web.AppRunner] = []

    async def start(handler: Handler) -> str:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", handler)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        runners.append(runner)
        port = runner.addresses[0][1]
        return f"http://127.0.0.1:{port}"

    yield start
    for runner in runners:
        await runner.cleanup()


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


@pytest.mark.parametrize(
    ("payload", "kind", "words"),
    [
        (b"data: {not json\n\n", ErrorKind.BROKEN_STREAM, "malformed SSE JSON"),
        (
            b'data: {"choices":[{"index":0,"delta":{"content":"a"}}]}\n\n',
            ErrorKind.BROKEN_STREAM,
            "without [DONE]",
        ),
        (b'data: {"error":{"message":"KV cache full"}}\n\n', ErrorKind.BROKEN_STREAM, "KV cache"),
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
