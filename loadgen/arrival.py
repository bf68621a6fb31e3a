"""A streamed answer's body, handed over the moment its bytes reach Python.

aiohttp's ``ResponseHandler.data_received`` runs straight from the I/O callback and
parses the HTTP framing synchronously, feeding the body into the response's
``StreamReader`` before it returns.  Reading that body from the request's task instead
(``iter_any``) costs a future, a task step and the reader's hand-out per HTTP chunk, and
a task may run a millisecond or more after its bytes came in when one decode step of a
batching engine sends a chunk to hundreds of streams at once: stamping there would add
the loop's backlog to TTFT and ITL.  So :class:`BodyTap` takes the body out of the reader
right after ``data_received`` parsed it, stamped with the time that call began, and the
task only waits for the end of the body (or its error: a stall, a dropped connection).
aiohttp's own stall timer (``sock_read``) is re-armed on every read, a timer cancelled
and another created, about a sixth of the client's CPU per chunk: once the body is
tapped, the tap notes the last arrival instead and checks it once per stall timeout.

This is the one place that relies on aiohttp's protocol internals (pinned <3.15): the
connector's ``_factory``, the synchronous parse in ``data_received`` and the protocol's
``read_timeout``; ``tests/loadgen/test_body_tap.py`` fails loudly if any changes.
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

    def data_received(self, data: bytes) -> None:
        now = time.perf_counter()
        super().data_received(data)  # parses, and feeds the body to the response's reader
        tap = self.tap
        if tap is not None:
            tap.take(now)

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


class BodyTap:
    """Hands a response's body to ``on_bytes(data, arrived_at)`` as it arrives.

    ``on_bytes`` runs inside the connection's ``data_received``: an exception it raises
    becomes the reader's, which :meth:`wait_end` raises in the request's task.
    """

    __slots__ = ("_error", "_last_at", "_on_bytes", "_proto", "_reader", "_stall_check", "_stall_s")

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
        conn = resp.connection
        # No connection: the whole body came with the head and the connection was
        # already released; wait_end reads what is buffered.
        self._proto = conn.protocol if conn is not None else None
        self._stall_s = stall_s
        self._stall_check: asyncio.TimerHandle | None = None
        self._last_at = time.perf_counter()
        if isinstance(self._proto, StampingHandler):
            self._proto.tap = self
            self._proto.read_timeout = None  # for this response only: set per request
            loop = asyncio.get_running_loop()
            self._stall_check = loop.call_later(stall_s, self._check_stall)
            # Bytes that came with the head are stamped now: late, never early.
            self.take(self._last_at)

    def take(self, now: float) -> None:
        """Hand over what the reader holds (called from ``data_received``)."""
        self._last_at = now
        reader = self._reader
        if reader.exception() is not None:
            return  # the reader failed: wait_end raises it
        try:
            data = reader.read_nowait()
            if data:
                self._on_bytes(data, now)
        except Exception as exc:  # the task's, never the event loop's
            self.detach()
            self._error = exc
            reader.set_exception(exc)  # wakes wait_end
            return
        if reader.is_eof():
            self.detach()  # the connection may serve another request from now on

    def _check_stall(self) -> None:
        idle_s = time.perf_counter() - self._last_at
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
        if not isinstance(self._proto, StampingHandler):
            async for data in reader.iter_any():  # a body that was complete already
                self._on_bytes(data, time.perf_counter())
            return
        if reader.exception() is None and not reader.is_eof():
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
