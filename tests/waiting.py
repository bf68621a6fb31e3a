"""Waiting for something to happen, with a bound: tests synchronise on what they
can observe, never on a sleep long enough "usually".

The deadline is a bound on a hang, not a speed assertion: it is generous so that
a busy 2-core machine only makes a test slower, never fail.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")
POLL_S = 0.05


def _timed_out(what: str, timeout_s: float, last: object) -> AssertionError:
    shown = f":\n{last}" if isinstance(last, str) and "\n" in last else f" {last!r}"
    return AssertionError(f"timed out after {timeout_s:g} s waiting for {what}; last seen{shown}")


def poll_until(
    probe: Callable[[], T],
    what: str,
    *,
    timeout_s: float = 30.0,
    every_s: float = POLL_S,
    ignoring: tuple[type[BaseException], ...] = (),
    done: Callable[[T], object] = bool,
) -> T:
    """Call ``probe`` until ``done`` holds for what it returns (by default: until it
    returns something truthy), and return that; a timeout shows the last value.

    Exceptions in ``ignoring`` mean "not yet" (a port that still refuses).
    """
    deadline = time.monotonic() + timeout_s
    last: object = None
    while True:
        try:
            value = probe()
        except ignoring as exc:
            last = exc
        else:
            if done(value):
                return value
            last = value
        if time.monotonic() > deadline:
            raise _timed_out(what, timeout_s, last)
        time.sleep(every_s)


async def apoll_until(
    probe: Callable[[], Awaitable[T] | T],
    what: str,
    *,
    timeout_s: float = 30.0,
    every_s: float = POLL_S,
    ignoring: tuple[type[BaseException], ...] = (),
    done: Callable[[T], object] = bool,
    pause: Callable[[float], Awaitable[object]] = asyncio.sleep,
) -> T:
    """``poll_until`` for the event loop: ``probe`` may be a coroutine function, and
    ``pause`` is what lets the rest run meanwhile (a Textual pilot's ``pause``)."""
    deadline = time.monotonic() + timeout_s
    last: object = None
    while True:
        try:
            value = probe()
            if inspect.isawaitable(value):
                value = await value
        except ignoring as exc:
            last = exc
        else:
            if done(value):  # type: ignore[arg-type]
                return value  # type: ignore[return-value]
            last = value
        if time.monotonic() > deadline:
            raise _timed_out(what, timeout_s, last)
        await pause(every_s)


PROPERTY_DEADLINE_MS = 30_000
"""Hypothesis's deadline for one example of a property test: a bound on a hang (a
decode or a parse that never ends), not a speed assertion. An example of a few ms took
1.9 s on a busy 2-core box, past the 1 s deadline it had, and a deadline is exceeded
only once for Hypothesis to fail the test."""
