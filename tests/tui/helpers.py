"""Driving the app as a person would: wait for what the screen shows."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from textual.pilot import Pilot
from textual.widget import Widget
from textual.widgets import Static


async def wait_until(
    pilot: Pilot[Any], condition: Callable[[], bool], what: str, timeout_s: float = 60.0
) -> None:
    """Pump the app until ``condition`` holds (a bound, not a speed assertion)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await pilot.pause(0.1)


def text_of(pilot: Pilot[Any], selector: str) -> str:
    widget = pilot.app.screen.query_one(selector, Static)
    return str(widget.render())


def painted(widget: Widget) -> str:
    """What ``widget`` shows on the terminal now, line by line (its rendered strips)."""
    return "\n".join(widget.render_line(y).text for y in range(widget.size.height))


async def type_into(pilot: Pilot[Any], selector: str, text: str) -> None:
    widget = pilot.app.screen.query_one(selector)
    widget.value = ""
    widget.focus()
    await pilot.press(*text)
