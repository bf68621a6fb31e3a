"""Driving the app as a person would: wait for what the screen shows."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from textual.pilot import Pilot
from textual.widget import Widget
from textual.widgets import Static

from tests.waiting import apoll_until


async def wait_until(
    pilot: Pilot[Any], condition: Callable[[], bool], what: str, timeout_s: float = 60.0
) -> None:
    """Pump the app until ``condition`` holds (a bound, not a speed assertion)."""
    await apoll_until(condition, what, timeout_s=timeout_s, every_s=0.1, pause=pilot.pause)


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
