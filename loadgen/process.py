"""Process-level helpers of a load test: its clock, its event loop, its file
limit, and SIGTERM handled like Ctrl-C."""

from __future__ import annotations

import asyncio
import gc
import signal
import threading
import time
import uuid
from collections.abc import Coroutine
from types import FrameType
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


GC_YOUNG_OBJECTS = 50_000
"""Allocations between young-generation collections while a run goes (Python's default
is 700): thousands of streams allocate fast, and each collection walks every young
object; with the objects that exist before the run frozen out of the collector this
took a quarter of a 4,000-stream level's client CPU away."""


def run_in_new_loop(coro: Coroutine[Any, Any, T]) -> T:
    """Run on uvloop when installed (lower per-chunk overhead), else asyncio, with the
    garbage collector tuned for a load test (``GC_YOUNG_OBJECTS``; restored after)."""
    threshold = gc.get_threshold()
    gc.freeze()  # what exists before the run (modules, the workload) is never garbage
    gc.set_threshold(GC_YOUNG_OBJECTS, *threshold[1:])
    try:
        try:
            import uvloop
        except ImportError:
            return asyncio.run(coro)
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            return runner.run(coro)
    finally:
        gc.set_threshold(*threshold)
        gc.unfreeze()


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


class TermAsInterrupt:
    """While entered, SIGTERM (what ``timeout``, systemd and CI send) stops the run
    as Ctrl-C does: it calls the SIGINT handler in place (``asyncio.Runner``'s:
    cancel the run, then raise KeyboardInterrupt), so requests in flight are
    recorded as cut and the caller can mark the run interrupted and close its
    sinks.  ``received`` tells the two signals apart (exit 143, not 130)."""

    def __init__(self) -> None:
        self.received = False
        self._previous: Any = None
        self._installed = False

    def __enter__(self) -> TermAsInterrupt:
        if threading.current_thread() is threading.main_thread():  # signals need it
            self._previous = signal.signal(signal.SIGTERM, self._on_term)
            self._installed = True
        return self

    def __exit__(self, *exc: object) -> None:
        if self._installed:
            signal.signal(signal.SIGTERM, self._previous or signal.SIG_DFL)
            self._installed = False

    def _on_term(self, _signum: int, frame: FrameType | None) -> None:
        self.received = True
        handler = signal.getsignal(signal.SIGINT)
        if not callable(handler):  # SIGINT ignored or left to C: stop all the same
            raise KeyboardInterrupt
        handler(signal.SIGINT, frame)
