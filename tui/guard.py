"""No widget that fails to draw ends the app: it shows why in its own place, the rest of
the screen stays usable (issue 23, point 1).

Textual hands any exception raised while a widget draws to the app, which exits with a
traceback: one value a chart library cannot scale (plotext's log of a log at 80x24),
one table row that cannot be formatted, and the operator loses the whole fleet view.
Every widget is drawn through two calls, so the guard sits there once, for every widget
of every screen, instead of in each widget:

* ``Widget._render``: the visual of a widget that has a ``render()`` (Static, the
  charts), also used to measure an auto-sized one while the screen is laid out;
* ``Widget.render_lines``: what the compositor asks of every widget, so a widget that
  draws line by line (the tables' ``render_line``) is covered too.

A failure is logged (``textual console``) with its traceback and drawn as one red line.

One key ended the app too, through a Textual 8.2.8 defect: PageUp / PageDown in a
dropdown (a Select's list) whose lines were not laid out yet (a target list filled while
the screen was away, opened at 80x24) looked up a line it had not made (KeyError).  A
page move there now waits for the lines: it moves nothing until they exist.
"""

from __future__ import annotations

from collections.abc import Callable

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual._widget_navigation import Direction
from textual.geometry import Region
from textual.strip import Strip
from textual.visual import Visual, visualize
from textual.widget import Widget
from textual.widgets import OptionList

ERROR_STYLE = Style(color="red", bold=True)


def failure_text(widget: Widget, exc: Exception) -> str:
    """What a widget that failed to draw shows instead."""
    name = f"#{widget.id}" if widget.id else type(widget).__name__
    return f"{name} cannot be drawn: {type(exc).__name__}: {exc}"


def _failed(widget: Widget, exc: Exception) -> str:
    widget.log.error(f"{widget!r} failed to draw", exc)
    return failure_text(widget, exc)


def _guard_visual(render: Callable[[Widget], Visual]) -> Callable[[Widget], Visual]:
    def guarded(self: Widget) -> Visual:
        try:
            return render(self)
        except Exception as exc:
            return visualize(self, Text(_failed(self, exc), style=ERROR_STYLE), markup=False)

    return guarded


def _guard_lines(
    render_lines: Callable[[Widget, Region], list[Strip]],
) -> Callable[[Widget, Region], list[Strip]]:
    def guarded(self: Widget, crop: Region) -> list[Strip]:
        try:
            return render_lines(self, crop)
        except Exception as exc:
            said = Strip([Segment(_failed(self, exc), ERROR_STYLE)])
            first = said.crop_extend(0, crop.width, None)
            return [first, *(Strip.blank(crop.width) for _ in range(crop.height - 1))]

    return guarded


def _guard_paging(
    move_page: Callable[[OptionList, Direction], None],
) -> Callable[[OptionList, Direction], None]:
    def guarded(self: OptionList, direction: Direction) -> None:
        self._update_lines()
        if (self.highlighted or 0) not in self._index_to_line:
            return  # not laid out yet: no page to move by
        move_page(self, direction)

    return guarded


_installed = False


def install() -> None:
    """Guard every widget's drawing (once: the app calls it as it is built)."""
    global _installed
    if _installed:
        return
    # the two calls every widget is drawn through (module note)
    Widget._render = _guard_visual(Widget._render)  # type: ignore[method-assign, assignment]
    Widget.render_lines = _guard_lines(Widget.render_lines)  # type: ignore[method-assign, assignment]
    OptionList._move_page = _guard_paging(OptionList._move_page)  # type: ignore[method-assign, assignment]
    _installed = True
