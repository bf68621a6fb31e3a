"""A lean OpenAI-compatible streaming client for load tests.

One ``aiohttp`` session serves every request of a run.  Each answer's body is taken
from the connection as its bytes arrive (:mod:`loadgen.arrival`) and split into SSE
events there (:mod:`loadgen.sse`); the request's task only waits for its end.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import aiohttp
from aiohttp.client_proto import ResponseHandler
from aiohttp.client_reqrep import ClientRequest
from aiohttp.tracing import Trace

from loadgen.arrival import BodyTap, stamping
from loadgen.sse import ERROR_BODY_PREVIEW_BYTES, EngineError, ProtocolError, SseSink, loads
from loadgen.sse import StreamState as StreamState  # the runner's and tests' name for it
from runs.records import ErrorKind

READ_BUFSIZE_BYTES = 4 * 1024 * 1024
MAX_HEADER_LINE_BYTES = 64 * 1024
MAX_SSE_LINE_BYTES = 1024 * 1024
"""Default longest SSE line: a chunk is one delta and its metadata, a few KB; a line
past a MiB is a broken engine, and buffering it without bound would eat memory."""
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
        except ProtocolError as exc:
            state.fail(ErrorKind.PROTOCOL, str(exc))
        except EngineError as exc:
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
                await _read_events(resp, state, self._limits)
            except (ProtocolError, EngineError):
                resp.close()  # closed, never pooled: the rest of the stream is junk
                raise


_SSE_FIELD = re.compile(rb"\s*(?::|data:|event:|id:|retry:)")
"""An event stream's first line (a stream cut before its first event is broken, not garbage)."""


def _judge_eventless(preview: bytes, state: StreamState) -> None:
    """A 2xx answer that is no event stream at all: the engine's error as a JSON body, or
    garbage."""
    try:
        obj = loads(preview)
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
    resp: aiohttp.ClientResponse, state: StreamState, limits: ClientLimits
) -> None:
    sink = SseSink(state, limits.max_line_bytes)
    tap = BodyTap(resp, sink.feed, limits.stall_timeout_s)
    try:
        await tap.wait_end()
    finally:
        tap.detach()  # also when cancelled: ``state`` is the caller's from here on
    sink.finish(time.perf_counter())
