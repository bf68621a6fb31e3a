"""Fuzzing the SSE parser of the load generator's stream client (issue 22,
docs/reliability.md), over real HTTP: a stand-in engine on 127.0.0.1 writes each
generated answer in generated fragments (TCP may cut anywhere). A well-formed stream
measures exactly its content chunks, usage and finish; one event that is garbage makes
the request a `protocol` failure, one error event an `engine_error`, each with the
chunks before it counted; arbitrary bytes end in a verdict the stream's end explains.
Each example is bounded in time (hypothesis deadline)."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import re
import threading
from collections.abc import Iterator

import pytest
from aiohttp import web
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loadgen.openai_stream import ClientLimits, StreamClient, StreamState, build_body
from runs.records import ErrorKind
from tests.waiting import PROPERTY_DEADLINE_MS

SETTINGS = settings(
    max_examples=int(os.environ.get("PROP_EXAMPLES", "40")),
    deadline=PROPERTY_DEADLINE_MS,  # a local round trip included: a parse never hangs
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


class StandIn:
    """An engine in a thread of its own that answers request ``X-Request-Id: n`` with
    ``answers[n]``: its fragments, each written (and flushed) on its own."""

    def __init__(self) -> None:
        self.answers: dict[str, list[bytes]] = {}
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.runner = asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(30)
        self.url = f"http://127.0.0.1:{self.runner.addresses[0][1]}/v1/chat/completions"

    async def _start(self) -> web.AppRunner:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._answer)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        return runner

    async def _answer(self, request: web.Request) -> web.StreamResponse:
        await request.read()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for fragment in self.answers.pop(request.headers["X-Request-Id"]):
            await resp.write(fragment)
        await resp.write_eof()
        return resp

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(30)
        self.loop.close()

    def read(self, fragments: list[bytes]) -> StreamState:
        """The client's verdict on this answer."""
        key = str(len(self.answers)) + os.urandom(4).hex()
        self.answers[key] = fragments

        async def one() -> StreamState:
            state = StreamState()
            body = build_body(model="m", prompt="hi", max_tokens=8, chat=True, include_usage=True)
            limits = ClientLimits(concurrency=1, request_timeout_s=5, stall_timeout_s=2)
            async with StreamClient(limits) as client:
                await client.stream(self.url, body, state, request_id=key)
            return state

        return asyncio.run(one())


@pytest.fixture(scope="module")
def engine() -> Iterator[StandIn]:
    stand_in = StandIn()
    try:
        yield stand_in
    finally:
        stand_in.close()


def event(obj: object) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def content(text: str) -> bytes:
    return event({"choices": [{"index": 0, "delta": {"content": text}}]})


ROLE = event({"choices": [{"index": 0, "delta": {"role": "assistant"}}]})
NOISE = st.sampled_from([b"", b": keep-alive\n\n", b"event: message\n", b"\n", b"id: 7\n"])


@st.composite
def fragments_of(draw: st.DrawFn, payload: bytes) -> list[bytes]:
    """``payload`` cut at arbitrary points (every cut a separate write)."""
    cuts = sorted(draw(st.sets(st.integers(1, max(1, len(payload) - 1)), max_size=8)))
    bounds = [0, *cuts, len(payload)]
    return [payload[a:b] for a, b in itertools.pairwise(bounds) if a < b]


texts = st.text(min_size=1, max_size=12).filter(str.strip)


@SETTINGS
@given(
    data=st.data(),
    contents=st.lists(texts, min_size=1, max_size=6),
    usage=st.none() | st.tuples(st.integers(0, 10**6), st.integers(0, 10**6)),
    finish=st.sampled_from(["stop", "length"]),
    done=st.booleans(),
)
def test_a_well_formed_stream_is_measured_exactly(
    engine: StandIn,
    data: st.DataObject,
    contents: list[str],
    usage: tuple[int, int] | None,
    finish: str,
    done: bool,
) -> None:
    parts = [ROLE] + [data.draw(NOISE) + content(text) for text in contents]
    parts.append(event({"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]}))
    if usage is not None:
        counts = {"prompt_tokens": usage[0], "completion_tokens": usage[1]}
        parts.append(event({"choices": [], "usage": counts}))
    if done:
        parts.append(b"data: [DONE]\n\n")
    state = engine.read(data.draw(fragments_of(b"".join(parts))))
    assert state.error_kind is None, state.error_message
    assert len(state.chunk_perf) == len(contents)
    assert state.finish_reason == finish and state.done is done
    expected = (None, None) if usage is None else usage
    assert (state.usage_prompt_tokens, state.usage_completion_tokens) == expected


@SETTINGS
@given(
    data=st.data(),
    before=st.lists(texts, max_size=4),
    bad=st.sampled_from(["garbage", "not_an_object", "error"]),
    junk=st.binary(max_size=20).map(lambda b: b.replace(b"\n", b"").replace(b"\r", b"")),
)
def test_one_bad_event_is_the_requests_own_failure_kind(
    engine: StandIn, data: st.DataObject, before: list[str], bad: str, junk: bytes
) -> None:
    if bad == "garbage":  # 0xFF never occurs in UTF-8 text, so never in JSON
        line, kind, words = b"data: \xff" + junk + b"\n\n", ErrorKind.PROTOCOL, "malformed SSE"
    elif bad == "not_an_object":
        value = data.draw(st.lists(st.integers(), max_size=3) | st.integers() | texts)
        line, kind, words = event(value), ErrorKind.PROTOCOL, "not an object"
    else:
        message = data.draw(texts)
        line, kind, words = event({"error": {"message": message}}), ErrorKind.ENGINE_ERROR, ""
    after = content("late") + b"data: [DONE]\n\n"
    payload = ROLE + b"".join(content(t) for t in before) + line + after
    state = engine.read(data.draw(fragments_of(payload)))
    assert state.error_kind is kind, state.error_message
    assert words in (state.error_message or "")
    assert len(state.chunk_perf) == len(before)  # counted up to the bad event, none after


@SETTINGS
@given(data=st.data(), payload=st.binary(max_size=200))
def test_arbitrary_bytes_end_in_a_verdict_the_stream_explains(
    engine: StandIn, data: st.DataObject, payload: bytes
) -> None:
    state = engine.read(data.draw(fragments_of(payload)))
    if state.error_kind is None:  # then it really was a finished stream with content
        assert (state.done or state.finish_reason) and state.chunk_perf
    else:
        assert state.error_kind in {
            ErrorKind.PROTOCOL,
            ErrorKind.ENGINE_ERROR,
            ErrorKind.BROKEN_STREAM,
            ErrorKind.NO_CONTENT,
        }, state.error_message
        assert state.error_message
    if not payload:
        assert state.error_kind is ErrorKind.BROKEN_STREAM  # headers, then nothing
    elif not re.match(rb"\s*(:|data:|event:|id:|retry:)", payload) and b"\n" not in payload:
        # one line that is no SSE field: no event stream at all
        assert state.error_kind in (ErrorKind.PROTOCOL, ErrorKind.ENGINE_ERROR)
