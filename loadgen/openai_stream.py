"""A lean OpenAI-compatible streaming client for load tests.

One ``aiohttp`` session serves every request of a run.  The parser reads raw
bytes (``iter_any``) and splits SSE lines itself, so a long context never hits
aiohttp's per-line limit (the 64 KB default broke vLLM's own benchmark at 50k
tokens), and timestamps are taken the moment bytes reach Python.  Each byte is
scanned once, so a long line costs linear time, and a line longer than
``ClientLimits.max_line_bytes`` fails its request as a protocol error.

Values no engine can truly report (a negative or 10**40 token count, a NaN
speed) fail their request as a protocol error too, rather than poisoning the
run's figures or the store.

Timing is kept in ``perf_counter`` seconds in a mutable :class:`StreamState`
that the caller owns: when a run's deadline cancels a request, the caller still
has everything measured so far and can record it as *incomplete*.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import aiohttp
from aiohttp.client_proto import ResponseHandler
from aiohttp.client_reqrep import ClientRequest
from aiohttp.tracing import Trace

from loadgen.arrival import ArrivalClock, stamping
from runs.records import ErrorKind

_DECODER = json.JSONDecoder()


def _json_loads(payload: bytes | bytearray) -> Any:
    """One SSE payload as JSON: what ``json.loads`` does for bytes without its encoding
    sniffing and trailing-space pass (the payload is stripped UTF-8), a third of its cost."""
    text = payload.decode()
    obj, end = _DECODER.raw_decode(text)
    if end != len(text):
        raise ValueError(f"extra data after the JSON value at character {end}")
    return obj


try:  # orjson parses chunks ~3x faster; optional.
    import orjson

    _loads: Callable[[bytes | bytearray], Any] = orjson.loads
except ImportError:  # pragma: no cover - depends on the environment
    _loads = _json_loads

READ_BUFSIZE_BYTES = 4 * 1024 * 1024
MAX_HEADER_LINE_BYTES = 64 * 1024
MAX_SSE_LINE_BYTES = 1024 * 1024
"""Default longest SSE line: a chunk is one delta and its metadata, a few KB; a line
past a MiB is a broken engine, and buffering it without bound would eat memory."""
MAX_COUNT = 2**63 - 1
"""The largest token count accepted (SQLite's INTEGER); a larger one cannot be true."""
ERROR_BODY_PREVIEW_BYTES = 2048
CONNECTS_AT_ONCE = 128
"""Connections being opened at once.  A level of 10,000 streams starting together would
otherwise send 10,000 handshakes in one burst: past the listening kernel's SYN and accept
queues (2,048 and 4,096 by default) they are dropped, and wait out SYN retransmits (1 s,
3 s, 7 s...) past the connect timeout.  In turns each takes a round trip; the wait for a
turn is before the send (``sent_at``), never in a latency.  (At 512 at once, 5 % of a
10,000-stream start still timed out on a busy 2-core machine; at 128 none did.)"""


@dataclass(frozen=True, slots=True)
class ClientLimits:
    concurrency: int | None
    """Requests in flight at most; None: unbounded (an open loop must never queue here)."""
    request_timeout_s: float = 600.0
    stall_timeout_s: float = 60.0
    """No byte for this long means the server stalled: a timeout failure."""
    connect_timeout_s: float = 10.0
    reuse_connections: bool = True
    """False for engines that close the socket after each stream (llama-server)."""
    max_line_bytes: int = MAX_SSE_LINE_BYTES
    """A longer SSE line fails the request (protocol error) and closes its connection."""


class StreamState:
    """What one request measured so far (perf_counter seconds)."""

    __slots__ = (
        "chunk_perf",
        "done",
        "error_kind",
        "error_message",
        "events",
        "finish_reason",
        "http_status",
        "preview",
        "sent_perf",
        "server_decode_tok_s",
        "usage_completion_tokens",
        "usage_prompt_tokens",
    )

    def __init__(self) -> None:
        self.sent_perf: float | None = None
        self.chunk_perf: list[float] = []
        """Arrival time of every content chunk (role-only / usage chunks excluded)."""
        self.done = False
        self.events = 0
        """SSE data events read (any, content or not)."""
        self.preview = bytearray()
        """The answer's first bytes: what it was when it held no event."""
        self.finish_reason: str | None = None
        self.usage_prompt_tokens: int | None = None
        self.usage_completion_tokens: int | None = None
        self.server_decode_tok_s: float | None = None
        self.http_status: int | None = None
        self.error_kind: ErrorKind | None = None
        self.error_message: str | None = None

    def fail(self, kind: ErrorKind, message: str) -> None:
        self.error_kind = kind
        self.error_message = message[:500]


def endpoint_url(base_url: str, chat: bool) -> str:
    """``http://h:p`` or ``http://h:p/v1`` -> the chat or completions endpoint."""
    base = base_url.rstrip("/")
    if not base.endswith("/v1"):
        base += "/v1"
    return base + ("/chat/completions" if chat else "/completions")


def build_body(
    *,
    model: str,
    prompt: str,
    max_tokens: int,
    chat: bool,
    include_usage: bool,
    extra: Mapping[str, Any] | None = None,
) -> bytes:
    body: dict[str, Any] = {"model": model, "stream": True, "max_tokens": max_tokens}
    if chat:
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    if include_usage:
        body["stream_options"] = {"include_usage": True}
    if extra:
        body.update(extra)
    return json.dumps(body, separators=(",", ":")).encode()


def _has_content(choice: Mapping[str, Any]) -> bool:
    delta = choice.get("delta")
    if isinstance(delta, dict):
        # Reasoning and tool-call deltas are tokens too; a role-only delta is not.
        return bool(
            delta.get("content")
            or delta.get("reasoning_content")
            or delta.get("reasoning")
            or delta.get("tool_calls")
        )
    return bool(choice.get("text"))


def _count(usage: Mapping[str, Any], name: str) -> int | None:
    """A usage token count: absent / null is None; a value that cannot be a count is
    a protocol error (``bool`` is an ``int`` in Python, but not a count)."""
    value = usage.get(name)
    if value is None:
        return None
    if type(value) is not int or not 0 <= value <= MAX_COUNT:
        raise _ProtocolError(f"usage.{name} = {value!r:.60} is not a possible token count")
    return value


def _speed(timings: Mapping[str, Any]) -> float | None:
    value = timings.get("predicted_per_second")
    if value is None:
        return None
    # Compared, not converted first: NaN, inf and a 400-digit int all fail here.
    if type(value) not in (int, float) or not 0 <= value <= sys.float_info.max:
        raise _ProtocolError(f"timings.predicted_per_second = {value!r:.60} is not a speed")
    return float(value)


def _take_event(state: StreamState, payload: bytes | bytearray, now: float) -> None:
    if payload == b"[DONE]":
        state.done = True
        return
    try:
        obj = _loads(payload)
    except ValueError as exc:
        raise _ProtocolError(f"malformed SSE JSON: {exc}; data={payload[:120]!r}") from None
    if not isinstance(obj, dict):
        raise _ProtocolError(f"SSE data is not an object: {payload[:120]!r}")
    state.events += 1
    if obj.get("error") is not None:
        raise _EngineError(f"error event in stream: {str(obj['error'])[:300]}")
    choices = obj.get("choices")
    if choices and isinstance(choices, list) and isinstance(choices[0], dict):
        choice = choices[0]
        if _has_content(choice):
            state.chunk_perf.append(now)
        if choice.get("finish_reason"):
            state.finish_reason = str(choice["finish_reason"])
    usage = obj.get("usage")
    if isinstance(usage, dict):
        state.usage_prompt_tokens = _count(usage, "prompt_tokens")
        state.usage_completion_tokens = _count(usage, "completion_tokens")
    timings = obj.get("timings")  # llama.cpp's own per-request timing
    if isinstance(timings, dict):
        speed = _speed(timings)
        if speed is not None:
            state.server_decode_tok_s = speed


async def _on_body_sent(
    _session: aiohttp.ClientSession,
    ctx: SimpleNamespace,
    _params: aiohttp.TraceRequestChunkSentParams,
) -> None:
    # On Python < 3.12 aiohttp writes the body (and the headers coalesced with
    # it) from a task of its own, which a busy loop may run milliseconds after
    # ``post()`` was called: the send time is when the bytes really went out.
    state = ctx.trace_request_ctx
    if isinstance(state, StreamState):
        state.sent_perf = time.perf_counter()


_SEND_TRACE = aiohttp.TraceConfig()
_SEND_TRACE.on_request_chunk_sent.append(_on_body_sent)
_SEND_TRACE.freeze()


class _PacedConnector(aiohttp.TCPConnector):
    """Opens at most ``CONNECTS_AT_ONCE`` connections at a time (the connect timeout
    starts once a connection's turn came: it is ``super()``'s)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._opening = asyncio.Semaphore(CONNECTS_AT_ONCE)

    async def _create_connection(
        self,
        req: ClientRequest,
        traces: list[Trace],
        timeout: aiohttp.ClientTimeout,  # noqa: ASYNC109 - aiohttp's own signature
    ) -> ResponseHandler:
        async with self._opening:
            return await super()._create_connection(req, traces, timeout)


class _BrokenStream(Exception):
    pass


class _ProtocolError(Exception):
    """The engine sent what the protocol cannot carry: garbage, an impossible value, an
    oversize line."""


class _EngineError(Exception):
    """A 2xx answer that is the engine's error (an error event, llama.cpp's ``error:`` line,
    a JSON error body)."""


class _NoResponseByte(Exception):
    """The connection failed before any response byte: safe to retry once."""


class StreamClient:
    """Streams completions over one shared session; use as an async context manager."""

    def __init__(self, limits: ClientLimits, headers: Mapping[str, str] | None = None) -> None:
        self._limits = limits
        self._headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        self._headers.update(headers or {})
        self._session: aiohttp.ClientSession | None = None
        self._fresh: aiohttp.ClientSession | None = None

    def _new_session(self, force_close: bool) -> aiohttp.ClientSession:
        lim = self._limits
        connector = stamping(
            _PacedConnector(
                # Never the bottleneck of the load profile (0 is aiohttp's "no limit").
                limit=0 if lim.concurrency is None else lim.concurrency + 8,
                force_close=force_close,
                ttl_dns_cache=300,
            )
        )
        return aiohttp.ClientSession(
            connector=connector,
            trace_configs=[_SEND_TRACE],
            timeout=aiohttp.ClientTimeout(
                total=None, sock_connect=lim.connect_timeout_s, sock_read=lim.stall_timeout_s
            ),
            read_bufsize=READ_BUFSIZE_BYTES,
            max_line_size=MAX_HEADER_LINE_BYTES,
            max_field_size=MAX_HEADER_LINE_BYTES,
            auto_decompress=False,
        )

    async def __aenter__(self) -> StreamClient:
        self._session = self._new_session(force_close=not self._limits.reuse_connections)
        return self

    async def __aexit__(self, *exc: object) -> None:
        for session in (self._session, self._fresh):
            if session is not None:
                await session.close()

    async def stream(
        self, url: str, body: bytes, state: StreamState, request_id: str | None = None
    ) -> None:
        """Send one request and fill ``state``; never raises except on cancellation."""
        assert self._session is not None, "use StreamClient as an async context manager"
        headers = (
            self._headers if request_id is None else {**self._headers, "X-Request-Id": request_id}
        )
        try:
            async with asyncio.timeout(self._limits.request_timeout_s):
                try:
                    await self._attempt(self._session, url, body, headers, state)
                except _NoResponseByte:
                    # A pooled keep-alive socket the server had already closed
                    # (llama-server does this): a client artefact, so retry once
                    # on a socket of its own before calling it a failure.
                    if self._fresh is None:
                        self._fresh = self._new_session(force_close=True)
                    state.chunk_perf.clear()
                    await self._attempt(self._fresh, url, body, headers, state)
        except _NoResponseByte as exc:
            state.fail(ErrorKind.CONNECT, str(exc))
        except aiohttp.ServerTimeoutError as exc:
            stall = self._limits.stall_timeout_s
            state.fail(ErrorKind.TIMEOUT, f"no byte for {stall:g} s (stalled): {exc}")
        except TimeoutError:
            limit = self._limits.request_timeout_s
            state.fail(ErrorKind.TIMEOUT, f"not finished within the {limit:g} s request timeout")
        except _BrokenStream as exc:
            state.fail(ErrorKind.BROKEN_STREAM, str(exc))
        except _ProtocolError as exc:
            state.fail(ErrorKind.PROTOCOL, str(exc))
        except _EngineError as exc:
            state.fail(ErrorKind.ENGINE_ERROR, str(exc))
        except aiohttp.ClientError as exc:
            state.fail(ErrorKind.BROKEN_STREAM, f"{type(exc).__name__}: {exc}")
        else:
            if state.error_kind is None:
                self._judge_end(state)

    @staticmethod
    def _judge_end(state: StreamState) -> None:
        if not (state.done or state.finish_reason):
            if state.events or not state.preview or _SSE_FIELD.match(state.preview):
                state.fail(ErrorKind.BROKEN_STREAM, "stream ended without [DONE] or finish_reason")
            else:
                _judge_eventless(bytes(state.preview), state)
        elif not state.chunk_perf:
            state.fail(ErrorKind.NO_CONTENT, "the stream finished without a content chunk")

    async def _attempt(
        self,
        session: aiohttp.ClientSession,
        url: str,
        body: bytes,
        headers: Mapping[str, str],
        state: StreamState,
    ) -> None:
        state.sent_perf = time.perf_counter()  # refined by _SEND_TRACE once bytes are out
        try:
            resp = await session.post(url, data=body, headers=headers, trace_request_ctx=state)
        except (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError) as exc:
            # Nothing listens / refused / unreachable: retrying at once would not help.
            state.fail(ErrorKind.CONNECT, f"{type(exc).__name__}: {exc}")
            return
        except aiohttp.ServerTimeoutError:
            raise  # a stall before the headers: a timeout, not a stale socket
        except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError) as exc:
            raise _NoResponseByte(f"{type(exc).__name__}: {exc}") from exc
        async with resp:
            state.http_status = resp.status
            if not 200 <= resp.status < 300:
                text = await _preview(resp)
                # 429 is load, not a broken engine: its own kind, so a sweep shows where
                # the engine started refusing (TGI past --max-concurrent-requests).
                kind = ErrorKind.RATE_LIMITED if resp.status == 429 else ErrorKind.HTTP_STATUS
                state.fail(kind, f"HTTP {resp.status}: {text}")
                return
            try:
                await _read_events(resp, state, self._limits.max_line_bytes)
            except (_ProtocolError, _EngineError):
                resp.close()  # closed, never pooled: the rest of the stream is junk
                raise


_SSE_FIELD = re.compile(rb"\s*(?::|data:|event:|id:|retry:)")
"""An event stream's first line (a stream cut before its first event is broken, not garbage)."""


def _judge_eventless(preview: bytes, state: StreamState) -> None:
    """A 2xx answer that is no event stream at all: the engine's error as a JSON body, or
    garbage."""
    try:
        obj = _loads(preview)
    except ValueError:
        obj = None
    text = preview.decode("utf-8", "replace").strip()
    if isinstance(obj, dict) and obj.get("error") is not None:
        state.fail(ErrorKind.ENGINE_ERROR, f"HTTP {state.http_status} with an error: {text}")
    else:
        state.fail(ErrorKind.PROTOCOL, f"not an event stream (no SSE event): {text[:300]!r}")


async def _preview(resp: aiohttp.ClientResponse) -> str:
    try:
        raw = await resp.content.read(ERROR_BODY_PREVIEW_BYTES)
    except (aiohttp.ClientError, TimeoutError):
        return "(body unreadable)"
    return raw.decode("utf-8", "replace").strip()


async def _read_events(
    resp: aiohttp.ClientResponse, state: StreamState, max_line_bytes: int
) -> None:
    """Split the payload into SSE lines in linear time: each read is scanned for
    newlines once, and only a line split across reads is copied (once more)."""
    arrived_by = ArrivalClock(resp)
    partial = bytearray()  # the current line's bytes from earlier reads
    offset = 0  # payload offset of ``data[0]``
    async for data in resp.content.iter_any():
        if len(state.preview) < ERROR_BODY_PREVIEW_BYTES:
            state.preview += data[: ERROR_BODY_PREVIEW_BYTES - len(state.preview)]
        start = 0
        while (nl := data.find(b"\n", start)) >= 0:
            if len(partial) + nl - start > max_line_bytes:
                raise _ProtocolError(_too_long(max_line_bytes))
            line: bytes | bytearray = data[start:nl]
            if partial:
                partial += line
                line, partial = partial, bytearray()
            if line.startswith(b"data:"):
                _take_event(state, line[5:].strip(), arrived_by(offset + nl + 1))
            elif line.startswith(b"error:"):  # llama.cpp's error in a stream
                raise _EngineError(f"error in stream: {bytes(line[6:]).strip()[:300]!r}")
            start = nl + 1
        if len(partial) + len(data) - start > max_line_bytes:
            raise _ProtocolError(_too_long(max_line_bytes))
        partial += memoryview(data)[start:]
        offset += len(data)
    if partial.startswith(b"data:"):  # last event without a trailing newline
        _take_event(state, partial[5:].strip(), time.perf_counter())


def _too_long(max_line_bytes: int) -> str:
    return (
        f"an SSE line is longer than {max_line_bytes:,} bytes (ClientLimits.max_line_bytes): "
        "the engine's stream is broken; the connection was closed"
    )
