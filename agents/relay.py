"""The proxy's leg to the engine: one request over a plain connection on the node's loopback,
the answer's head read here and its body handed to the client's connection as the engine
framed it.

Why not aiohttp's client: a proxied answer is a head and a stream of small SSE chunks, and
through a client session each chunk was parsed, queued, woken up in a task, re-framed and
written (benchmarks/proxy_bench.py: about 1.4 ms of the agent's CPU per 8-token answer, most
of it Python, most of that per chunk).  Here the connection's ``data_received`` writes each
block straight to the client's transport, unchanged: the engine's chunked framing is already
what the client's HTTP/1.1 connection needs, so the body is only scanned for its end
(``agents.http1.BodyEnd``), never re-encoded.  An answer with neither a length nor chunks (it
ends when the engine closes) is the one case re-framed, as chunks.

Connections: an engine that keeps them (vLLM, SGLang, TGI, ...) gets them back in a pool (idle
at most ``POOL_IDLE_S``); for an engine that closes its connection after every streamed answer
(llama-server) one is opened ahead of the request that will take it, so no connect lies in a
request's path.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Callable
from typing import cast

from agents.http1 import MAX_HEAD_BYTES, BodyEnd, Head, RelayError, parse_head

POOL_IDLE_S = 2.0
"""How long a pooled connection may wait for its next request: under the 5 s after which
uvicorn (vLLM, SGLang) closes an idle one, so the proxy never sends into a socket the
engine is closing (a request body cannot be sent twice)."""

SPARE_MAX_AGE_S = 0.5
"""A spare connection unused this long is closed: llama-server drops a connection that
sends nothing for its ``--timeout`` (1 s at the least the catalog lets one set), so a
younger spare is surely still open when a request takes it."""

AHEAD_AFTER_S = 0.001
"""The spare's connect waits this long, so it never delays the send of the request whose
arrival started it."""

HIGH_WATER_BYTES = 256 * 1024
"""Bytes waiting in the client's send buffer above which the engine's connection stops
being read until the client has drained them (back-pressure: the engine's own send
buffer fills and it waits)."""


class EngineConnection(asyncio.Protocol):
    """One connection to an engine, carrying one request at a time."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self.transport: asyncio.Transport | None = None
        self._method = "GET"
        self._head_buf = b""
        self.head: asyncio.Future[Head] | None = None
        self.done: asyncio.Future[None] | None = None
        self._pending: list[bytes] = []
        self._sink: asyncio.BaseTransport | None = None
        self._frame = False  # the answer ends at the close: each block goes out as a chunk
        self._drained: Callable[[], asyncio.Future[None]] | None = None
        self._end: BodyEnd | None = None
        self._left: int | None = None  # bytes of a sized body still to come

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports do not subclass asyncio's: a cast, not an isinstance check
        self.transport = cast(asyncio.Transport, transport)

    def send(self, method: str, request: bytes) -> None:
        """Send one request; ``head`` and ``done`` tell how its answer goes."""
        assert self.transport is not None
        self._method = method
        self._head_buf = b""
        self._pending = []
        self._sink = None
        self._end, self._left = None, None
        self.head = self._loop.create_future()
        self.done = self._loop.create_future()
        self.transport.write(request)

    def attach(
        self, sink: asyncio.BaseTransport, drained: Callable[[], asyncio.Future[None]]
    ) -> None:
        """From here the body goes straight to the client's transport; ``drained`` waits
        until the client's buffer has room again."""
        self._sink, self._drained = sink, drained
        pending, self._pending = self._pending, []
        for block in pending:
            self._out(block)

    def take_pending(self) -> bytes:
        """The body bytes that came with the head (they leave with the client's head)."""
        pending, self._pending = self._pending, []
        if self._frame:
            return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pending if p)
        return b"".join(pending)

    def data_received(self, data: bytes) -> None:
        head = self.head
        if head is None:
            return  # an idle connection has nothing to say: the next request gets a fresh head
        if not head.done():
            buf = self._head_buf + data
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                if len(buf) > MAX_HEAD_BYTES:
                    self._fail(RelayError("the engine's answer head is over 64 KiB"))
                self._head_buf = buf
                return
            try:
                parsed = parse_head(buf[:end], self._method)
            except RelayError as exc:
                self._fail(exc)
                return
            self._head_buf = b""
            self._frame = parsed.framing == "close"
            if parsed.framing == "chunked":
                self._end = BodyEnd()
            elif parsed.framing == "length":
                self._left = parsed.length
            head.set_result(parsed)
            data = buf[end + 4 :]
            if parsed.framing == "none" or self._left == 0:
                self._finish()
                return
            if not data:
                return
        self._body(data)

    def _body(self, data: bytes) -> None:
        assert self.done is not None
        if self.done.done():
            return  # bytes after the answer's end: a confused engine; the connection goes
        last = False
        try:
            if self._end is not None:
                cut = self._end.feed(data)
                if cut is not None:
                    data, last = data[:cut], True
            elif self._left is not None:
                data, last = data[: self._left], len(data) >= self._left
                self._left -= len(data)
        except RelayError as exc:
            self._fail(exc)
            return
        if self._sink is None:
            self._pending.append(data)
        else:
            self._out(data)
        if last:
            self._finish()

    def _out(self, data: bytes) -> None:
        sink = cast(asyncio.WriteTransport, self._sink)
        if sink.is_closing():
            self._fail(ConnectionResetError("the client went away"))
            return
        if not data:
            return
        sink.write(b"%x\r\n%s\r\n" % (len(data), data) if self._frame else data)
        if sink.get_write_buffer_size() > HIGH_WATER_BYTES and self.transport is not None:
            self.transport.pause_reading()
            assert self._drained is not None
            self._drained().add_done_callback(self._resume)

    def _resume(self, drained: asyncio.Future[None]) -> None:
        if not drained.cancelled() and drained.exception() is not None:
            return  # the client went away: the next block finds its transport closing
        if self.transport is not None and not self.transport.is_closing():
            self.transport.resume_reading()

    def _finish(self) -> None:
        if self.done is not None and not self.done.done():
            self.done.set_result(None)

    def _fail(self, exc: BaseException) -> None:
        self.close()
        for fut in (self.head, self.done):
            if fut is not None and not fut.done():
                fut.set_exception(exc)
                fut.exception()  # the head's is read by whoever waits; never "never retrieved"

    def connection_lost(self, exc: Exception | None) -> None:
        head, done = self.head, self.done
        if head is not None and not head.done():
            self._fail(RelayError(f"the engine closed the connection without an answer ({exc})"))
        elif done is not None and not done.done():
            if self._frame:  # the close is this answer's end (the handler ends the chunks)
                self._finish()
            else:
                self._fail(RelayError(f"the engine stopped mid-answer ({exc or 'closed'})"))

    def eof_received(self) -> bool | None:
        return None  # close our side too: connection_lost follows

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def reusable(self) -> bool:
        return self.transport is not None and not self.transport.is_closing()


class EnginePool:
    """The agent's connections to the node's engines, by (host, port)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, connect_timeout_s: float) -> None:
        self._loop = loop
        self._timeout_s = connect_timeout_s
        self._idle: dict[tuple[str, int], list[tuple[EngineConnection, float]]] = {}
        self._spares: dict[tuple[str, int], tuple[EngineConnection, float]] = {}
        """One spare per engine, not more: each open connection holds one of llama-server's
        HTTP threads (``--threads-http``, by default ``-np`` + 2 where the node has fewer
        cores than that), and a load that fills every slot leaves it no more to spare."""
        self._opening: dict[tuple[str, int], asyncio.Task[None]] = {}
        self._closed = False

    async def _connect(self, key: tuple[str, int]) -> EngineConnection:
        try:
            async with asyncio.timeout(self._timeout_s):
                _, conn = await self._loop.create_connection(
                    lambda: EngineConnection(self._loop), *key
                )
        except TimeoutError:
            raise RelayError(f"no connection within {self._timeout_s:g} s") from None
        except OSError as exc:  # "Connection refused", not asyncio's "Connect call failed"
            raise RelayError(os.strerror(exc.errno) if exc.errno else str(exc)) from None
        return conn

    async def take(self, key: tuple[str, int], *, ahead: bool) -> EngineConnection:
        """A connection for one request: an idle pooled one, the spare opened ahead (for an
        engine that closes after each answer, ``ahead``: the next spare is started here),
        or a new one."""
        now = self._loop.time()
        idle = self._idle.get(key)
        while idle:
            conn, since = idle.pop()
            if conn.reusable() and now - since < POOL_IDLE_S:
                return conn
            conn.close()
        if ahead:
            spare = self._spares.pop(key, None)
            if key not in self._opening and not self._closed:
                self._opening[key] = self._loop.create_task(self._open_ahead(key))
            if spare is not None:
                conn, opened_at = spare
                if conn.reusable() and now - opened_at < SPARE_MAX_AGE_S:
                    return conn
                conn.close()
        return await self._connect(key)

    def give_back(self, key: tuple[str, int], conn: EngineConnection) -> None:
        """A connection whose answer ended cleanly and that the engine keeps open."""
        if self._closed or not conn.reusable():
            conn.close()
            return
        conn.head = conn.done = None
        since = self._loop.time()
        self._idle.setdefault(key, []).append((conn, since))
        self._loop.call_later(POOL_IDLE_S, self._expire_idle, key, conn, since)

    def _expire_idle(self, key: tuple[str, int], conn: EngineConnection, since: float) -> None:
        idle = self._idle.get(key, [])
        with contextlib.suppress(ValueError):  # taken since: not idle any more
            idle.remove((conn, since))
            conn.close()
        if not idle:
            self._idle.pop(key, None)

    async def _open_ahead(self, key: tuple[str, int]) -> None:
        try:
            # After the request that asked for it has gone out: a timer, so the loop's
            # ready work (that request's send) runs first.
            await asyncio.sleep(AHEAD_AFTER_S)
            conn = await self._connect(key)
        except RelayError:
            return  # the next request connects itself and reports what failed
        finally:
            self._opening.pop(key, None)
        if self._closed:
            conn.close()
            return
        old = self._spares.get(key)
        if old is not None:
            old[0].close()
        self._spares[key] = (conn, self._loop.time())
        self._loop.call_later(SPARE_MAX_AGE_S, self._expire_spare, key, conn)

    def _expire_spare(self, key: tuple[str, int], conn: EngineConnection) -> None:
        spare = self._spares.get(key)
        if spare is not None and spare[0] is conn:
            del self._spares[key]
            conn.close()

    async def close(self) -> None:
        self._closed = True
        tasks = list(self._opening.values())
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for idle in self._idle.values():
            for conn, _ in idle:
                conn.close()
        for conn, _ in self._spares.values():
            conn.close()
        self._idle.clear()
        self._spares.clear()
