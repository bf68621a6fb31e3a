"""A streamed answer's body, handed over the moment its bytes reach Python.

aiohttp's ``ResponseHandler.data_received`` runs straight from the I/O callback and
parses the HTTP framing synchronously, calling the response's reader's ``feed_data``
with each HTTP chunk before it returns.  Reading that body from the request's task
instead (``iter_any``) costs a future, a task step and the reader's buffering per chunk,
and a task may run a millisecond or more after its bytes came in when one decode step of
a batching engine sends a chunk to hundreds of streams at once: stamping there would add
the loop's backlog to TTFT and ITL.  So once the head is in, :class:`BodyTap` makes the
response's reader hand each chunk straight to it (:class:`_TappedReader`), stamped with
the time ``data_received`` began, and the task only waits for the end of the body (or its
error: a stall, a dropped connection).  aiohttp's own stall timer (``sock_read``) is
re-armed on every read, a timer cancelled and another created, about a sixth of the
client's CPU per chunk: once the body is tapped, the tap checks the last arrival once per
stall timeout instead.

This is the one place that relies on aiohttp's internals (pinned <3.15): the connector's
``_factory``, the synchronous parse in ``data_received`` that calls the reader's
``feed_data`` per chunk, ``StreamReader``'s slots (the reader's class is swapped) and the
protocol's ``read_timeout``; ``tests/loadgen/test_body_tap.py`` fails loudly if any
changes.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable

import aiohttp
from aiohttp.client_proto import ResponseHandler
from aiohttp.streams import StreamReader


class StampingHandler(ResponseHandler):
    tap: BodyTap | None = None
    arrived_at = 0.0
    """When the bytes being parsed reached Python (the start of the last data_received)."""

    def data_received(self, data: bytes) -> None:
        self.arrived_at = time.perf_counter()
        super().data_received(data)  # parses, and feeds the body to the response's reader

    def resume_reading(self, resume_parser: bool = True) -> None:
        # aiohttp calls this after every read of a payload, paused or not; resuming a
        # connection that was never paused re-enters its parser with no bytes, about a
        # tenth of the client's CPU per streamed token.  Only a paused one is resumed.
        if self._reading_paused or self._buffer_paused:
            super().resume_reading(resume_parser)


def stamping(connector: aiohttp.TCPConnector) -> aiohttp.TCPConnector:
    """Make ``connector`` build stamping protocols (aiohttp pinned <3.15 has ``_factory``)."""
    if not hasattr(connector, "_factory"):
        raise RuntimeError(
            f"aiohttp {aiohttp.__version__} has no TCPConnector._factory: loadgen.arrival "
            "needs aiohttp 3.14.x (pyproject pins it); reinstall the pinned version"
        )
    connector._factory = functools.partial(StampingHandler, loop=connector._loop)  # type: ignore[assignment]
    return connector


class _TappedReader(StreamReader):
    """A tapped response's reader: each HTTP chunk the parser feeds goes to the tap, not
    into the buffer (whose append, hand-out and bookkeeping cost about a microsecond a
    chunk).  Its ``total_bytes`` stays where the tap began, so aiohttp's per-chunk
    bookkeeping (``end_http_chunk_receiving``) records nothing more.  It adds no slots,
    so a StreamReader can take it as its ``__class__``."""

    __slots__ = ()

    def feed_data(self, data: bytes, size: int = 0) -> bool:
        proto = self._protocol
        if isinstance(proto, StampingHandler) and (tap := proto.tap) is not None:
            if data:
                tap.feed(data, proto.arrived_at)
            return False  # nothing held back (aiohttp's "more data available")
        return super().feed_data(data, size)  # detached (ended, failed, cancelled)


class BodyTap:
    """Hands a response's body to ``on_bytes(data, arrived_at)`` as it arrives.

    ``on_bytes`` runs inside the connection's ``data_received``: an exception it raises
    becomes the reader's, which :meth:`wait_end` raises in the request's task.
    """

    __slots__ = ("_error", "_on_bytes", "_proto", "_reader", "_stall_check", "_stall_s")

    def __init__(
        self,
        resp: aiohttp.ClientResponse,
        on_bytes: Callable[[bytes, float], None],
        stall_s: float,
    ) -> None:
        self._on_bytes = on_bytes
        self._error: Exception | None = None
        """What ``on_bytes`` raised (kept here too: the body may have ended already)."""
        self._reader: StreamReader = resp.content
        self._stall_s = stall_s
        self._stall_check: asyncio.TimerHandle | None = None
        conn = resp.connection
        proto = conn.protocol if conn is not None else None
        self._proto: StampingHandler | None = None
        # No connection: the whole body came with the head and the connection was already
        # released; an empty body's reader is no StreamReader: wait_end reads those.
        reader = self._reader
        if not isinstance(proto, StampingHandler) or type(reader) is not StreamReader:
            return
        if reader.exception() is None:
            # Bytes that came with the head are stamped now: late, never early.
            self.feed(reader.read_nowait(), time.perf_counter())
        if self._error is not None:
            return
        self._proto = proto
        proto.tap = self
        proto.read_timeout = None  # for this response only: aiohttp sets it per request
        reader.__class__ = _TappedReader
        reader.on_eof(self.detach)  # the connection may serve another request from then on
        self._stall_check = asyncio.get_running_loop().call_later(stall_s, self._check_stall)

    def feed(self, data: bytes, arrived_at: float) -> None:
        """Hand ``data`` to ``on_bytes`` (from inside ``data_received``)."""
        try:
            if data:
                self._on_bytes(data, arrived_at)
        except Exception as exc:  # the task's, never the event loop's
            self.detach()
            self._error = exc
            self._reader.set_exception(exc)  # wakes wait_end

    def _check_stall(self) -> None:
        assert isinstance(self._proto, StampingHandler)
        idle_s = time.perf_counter() - self._proto.arrived_at
        if idle_s < self._stall_s:  # bytes came since: check again a stall after the last
            loop = asyncio.get_running_loop()
            self._stall_check = loop.call_later(self._stall_s - idle_s, self._check_stall)
            return
        self._stall_check = None
        self.detach()
        # aiohttp's own error for a stall; the unfinished body keeps the connection from
        # being pooled.
        self._reader.set_exception(aiohttp.SocketTimeoutError("Timeout on reading data"))

    async def wait_end(self) -> None:
        """Return at the end of the body; raise its error (a stall, a dropped connection,
        or what ``on_bytes`` raised)."""
        reader = self._reader
        if self._error is None:
            if self._proto is None:
                async for data in reader.iter_any():  # a body that was complete already
                    self.feed(data, time.perf_counter())
            elif reader.exception() is None and not reader.is_eof():
                await reader.wait_eof()
        exc = self._error or reader.exception()
        if exc is not None:
            raise exc

    def detach(self) -> None:
        if self._stall_check is not None:
            self._stall_check.cancel()
            self._stall_check = None
        proto = self._proto
        if isinstance(proto, StampingHandler) and proto.tap is self:
            proto.tap = None
