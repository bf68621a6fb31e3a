"""When each byte of a streamed answer really arrived.

aiohttp's ``ResponseHandler.data_received`` runs straight from the I/O
callback, before any task.  When one decode step of a batching engine sends a
chunk to hundreds of streams at once, a reader task may run a millisecond or
more after its bytes came in; stamping there would add the loop's backlog to
TTFT and ITL.  The handler below notes, per ``data_received``, the payload's
byte count and the time; the reader maps each SSE line's end offset back to the
first arrival that covered it.
"""

from __future__ import annotations

import functools
import time
from collections import deque

import aiohttp
from aiohttp.client_proto import ResponseHandler
from aiohttp.streams import StreamReader


class StampingHandler(ResponseHandler):
    watched: StreamReader | None = None
    marks: deque[tuple[int, float]]

    def data_received(self, data: bytes) -> None:
        now = time.perf_counter()
        super().data_received(data)
        watched = self.watched
        if watched is not None:
            self.marks.append((watched.total_bytes, now))

    def resume_reading(self, resume_parser: bool = True) -> None:
        # aiohttp calls this after every read of a payload, paused or not; resuming a
        # connection that was never paused re-enters its parser with no bytes, about a
        # tenth of the client's CPU per streamed token.  Only a paused one is resumed.
        if self._reading_paused or self._buffer_paused:
            super().resume_reading(resume_parser)


def stamping(connector: aiohttp.TCPConnector) -> aiohttp.TCPConnector:
    """Make ``connector`` build stamping protocols (aiohttp pinned <3.15 has ``_factory``)."""
    if hasattr(connector, "_factory"):
        connector._factory = functools.partial(StampingHandler, loop=connector._loop)  # type: ignore[assignment]
    return connector


class ArrivalClock:
    """``clock(end_offset)``: when the payload's first ``end_offset`` bytes had arrived."""

    __slots__ = ("_marks",)

    def __init__(self, resp: aiohttp.ClientResponse) -> None:
        conn = resp.connection
        proto = conn.protocol if conn is not None else None
        self._marks: deque[tuple[int, float]] | None = None
        if isinstance(proto, StampingHandler):
            proto.watched = resp.content
            # Bytes that came with the head are stamped now: late, never early.
            proto.marks = deque([(resp.content.total_bytes, time.perf_counter())])
            self._marks = proto.marks

    def __call__(self, end_offset: int) -> float:
        marks = self._marks
        if marks is None:
            return time.perf_counter()
        while marks and marks[0][0] < end_offset:
            marks.popleft()
        return marks[0][1] if marks else time.perf_counter()
