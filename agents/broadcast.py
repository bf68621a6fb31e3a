"""A sequence-numbered ring buffer with live subscribers: telemetry frames and
agent events both go through one, so a client that reconnects with the last
``seq`` it saw resumes without gaps (while the buffer still holds them)."""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncIterator
from typing import Generic, Protocol, TypeVar


class Sequenced(Protocol):
    @property
    def seq(self) -> int: ...


T = TypeVar("T", bound=Sequenced)


class Broadcast(Generic[T]):
    def __init__(self, size: int, queue_size: int = 64, boot_id: str = "") -> None:
        self.boot_id = boot_id
        self.items: deque[T] = deque(maxlen=size)
        self.queue_size = queue_size
        self._subscribers: set[asyncio.Queue[T]] = set()

    @property
    def last_seq(self) -> int:
        return self.items[-1].seq if self.items else 0

    @property
    def latest(self) -> T | None:
        return self.items[-1] if self.items else None

    @property
    def subscribers(self) -> int:
        return len(self._subscribers)

    def publish(self, item: T) -> None:
        self.items.append(item)
        for queue in list(self._subscribers):
            if queue.full():  # a slow client loses its oldest item, the agent keeps its memory
                with contextlib.suppress(asyncio.QueueEmpty):
                    queue.get_nowait()
            queue.put_nowait(item)

    def backlog(self, since_seq: int | None, *, latest_only: bool = False) -> list[T]:
        """Buffered items after ``since_seq``.  None: just the latest when
        ``latest_only`` (a new telemetry viewer), else nothing (a new event listener).
        A seq ahead of ours means the agent restarted: everything buffered."""
        if since_seq is None:
            return [self.items[-1]] if latest_only and self.items else []
        if since_seq > self.last_seq:
            return list(self.items)
        return [item for item in self.items if item.seq > since_seq]

    async def subscribe(
        self, since_seq: int | None = None, *, latest_only: bool = False, boot_id: str | None = None
    ) -> AsyncIterator[T]:
        """Items after ``since_seq``; a ``boot_id`` other than ours means the seq the client
        holds is from an earlier agent run, so it gets everything buffered."""
        if boot_id and since_seq is not None and boot_id != self.boot_id:
            since_seq = 0
        queue: asyncio.Queue[T] = asyncio.Queue(maxsize=self.queue_size)
        self._subscribers.add(queue)
        try:
            last = since_seq if since_seq is not None and since_seq <= self.last_seq else 0
            for item in self.backlog(since_seq, latest_only=latest_only):
                last = item.seq
                yield item
            while True:
                item = await queue.get()
                if item.seq > last:
                    last = item.seq
                    yield item
        finally:
            self._subscribers.discard(queue)
