"""Process-level helpers of a load test: its clock, its event loop, its file limit."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class RunClock:
    """Epoch seconds from one wall-clock reading plus ``perf_counter`` deltas."""

    def __init__(self) -> None:
        self.wall0 = time.time()
        self.perf0 = time.perf_counter()

    def epoch(self, perf: float) -> float:
        return self.wall0 + (perf - self.perf0)


def new_run_id() -> str:
    return uuid.uuid4().hex[:12]


def run_in_new_loop(coro: Coroutine[Any, Any, T]) -> T:
    """Run on uvloop when installed (lower per-chunk overhead), else asyncio."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(coro)


def ensure_fd_limit(streams: int) -> str | None:
    """Raise the soft open-files limit for ``streams`` sockets; a warning if it cannot."""
    try:
        import resource
    except ImportError:  # pragma: no cover - not POSIX
        return None
    need = streams + 256  # sockets plus the process's own files
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= need:
        return None
    target = need if hard == resource.RLIM_INFINITY else min(need, hard)
    resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    if target < need:
        return f"open-files limit {target} is below the {need} that {streams} streams need"
    return None
