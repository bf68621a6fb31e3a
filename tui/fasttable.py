"""A lean table for the fleet's big lists (32 nodes × 8 GPUs and their engines).

Textual's DataTable re-renders every visible cell after any update and measures
cells as they change; at 32 frames a second that alone costs more than the
TUI's CPU budget.  This table draws lines with the Line API, builds a row only
when it is on screen and its version changed (a node's frame sequence), and
caches the rest, so a redraw costs what the visible changed rows cost.  It is
given its rows' keys and a function making a row's item, which it asks only for
the rows it draws: at 256 nodes x 8 GPUs a redraw makes no item (alert marks,
version) for the 2,000 GPU rows out of view.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import ClassVar, Generic, TypeVar

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual import events
from textual.binding import Binding, BindingType
from textual.geometry import Region, Size
from textual.message import Message
from textual.reactive import reactive
from textual.scroll_view import ScrollView
from textual.strip import Strip
from textual.widget import Widget

from control.fleet_view import Item

V = TypeVar("V")
Cell = str | Text
"""What a row shows in one column (a plain string or styled text)."""
HEADER_STYLE = Style(bold=True, color="#d0d0d0", bgcolor="#303030")
CURSOR_STYLE = Style(reverse=True)
PAD = 1


class FastTable(ScrollView, Generic[V], can_focus=True):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("up", "move(-1)", "Up", show=False),
        Binding("down", "move(1)", "Down", show=False),
        Binding("pageup", "move(-10)", "Page up", show=False),
        Binding("pagedown", "move(10)", "Page down", show=False),
        Binding("home", "move(-1000000)", "Top", show=False),
        Binding("end", "move(1000000)", "Bottom", show=False),
        Binding("enter", "select", "Open", show=False),
    ]
    DEFAULT_CSS = "FastTable { height: 1fr; }"
    cursor_row: reactive[int] = reactive(0)

    class Selected(Message):
        # a plain Widget: a class nested in the generic table cannot use its row type
        def __init__(self, table: Widget, key: str) -> None:
            super().__init__()
            self.table = table
            self.key = key

        @property
        def control(self) -> Widget:
            return self.table

    def __init__(
        self,
        columns: Sequence[tuple[str, int]],
        cells: Callable[[V], Sequence[Cell]],
        *,
        id: str | None = None,
    ) -> None:
        super().__init__(id=id)
        self.columns = tuple(columns)
        self.cells_fn = cells
        self.keys: list[str] = []
        """The rows' keys, top to bottom."""
        self._item_at: Callable[[int], Item[V]] | None = None
        self._index: dict[str, int] = {}
        self._cache: dict[str, tuple[object, Strip]] = {}
        self._width = sum(w + 2 * PAD for _, w in self.columns)
        self._header = self._strip([label for label, _ in self.columns], HEADER_STYLE)

    # -- data --------------------------------------------------------------------
    def set_columns(self, columns: Sequence[tuple[str, int]]) -> None:
        """New column widths (the node names grew): every cached row is drawn again."""
        columns = tuple(columns)
        if columns == self.columns:
            return
        self.columns = columns
        self._cache.clear()
        self._width = sum(w + 2 * PAD for _, w in self.columns)
        self._header = self._strip([label for label, _ in self.columns], HEADER_STYLE)
        self.virtual_size = Size(self._width, len(self.keys) + 1)
        self.refresh()

    def set_rows(self, keys: list[str], item_at: Callable[[int], Item[V]]) -> None:
        """Show the rows ``keys``; ``item_at(i)`` makes row i's item (key ``keys[i]``), asked
        only when the row is drawn."""
        changed = keys != self.keys
        self.keys = keys
        self._item_at = item_at
        if not changed:
            self._refresh_changed_lines()
            return
        self._index = {k: n for n, k in enumerate(keys)}
        self._cache = {k: v for k, v in self._cache.items() if k in self._index}
        self.virtual_size = Size(self._width, len(keys) + 1)
        if self.cursor_row >= len(keys):
            self.cursor_row = max(0, len(keys) - 1)
        self.refresh()

    def _refresh_changed_lines(self) -> None:
        """Repaint the lines in view whose row's version moved, not the whole table: the
        compositor then redraws a few lines per redraw instead of every one in view."""
        top = int(self.scroll_offset.y)
        for index in range(top, min(len(self.keys), top + self.size.height - 1)):
            item = self._item(index)
            cached = self._cache.get(item.key)
            if cached is None or cached[0] != item.version:
                self.refresh_line(index + 1)  # the header is line 0

    @property
    def row_count(self) -> int:
        return len(self.keys)

    def cells(self, key: str) -> Sequence[Cell]:
        """The cells of row ``key`` as the screen shows them (tests read these)."""
        return self.cells_fn(self._item(self._index[key]).value)

    @property
    def selected_key(self) -> str | None:
        return self.keys[self.cursor_row] if self.keys else None

    def _item(self, index: int) -> Item[V]:
        assert self._item_at is not None  # set with the keys: no keys, no row to ask for
        return self._item_at(index)

    # -- drawing -------------------------------------------------------------------------
    def _strip(self, cells: Sequence[Cell], base: Style | None = None) -> Strip:
        segments: list[Segment] = []
        for (_, width), cell in zip(self.columns, cells, strict=False):
            text = cell if isinstance(cell, Text) else Text(str(cell))
            text = text.copy()
            text.truncate(width, overflow="ellipsis", pad=True)
            segments.append(Segment(" " * PAD, base))
            segments.extend(
                text.render(self.app.console)
                if base is None
                else (
                    Segment(s.text, base + s.style if s.style else base)
                    for s in text.render(self.app.console)
                )
            )
            segments.append(Segment(" " * PAD, base))
        return Strip(segments, self._width)

    def _row_strip(self, index: int) -> Strip:
        item = self._item(index)
        cached = self._cache.get(item.key)
        if cached is None or cached[0] != item.version:
            strip = self._strip(self.cells_fn(item.value))
            self._cache[item.key] = (item.version, strip)
        else:
            strip = cached[1]
        return strip

    def render_line(self, y: int) -> Strip:
        scroll_x, scroll_y = self.scroll_offset
        width = self.size.width
        if y == 0:
            return self._header.crop(scroll_x, scroll_x + width).extend_cell_length(width)
        index = scroll_y + y - 1
        if index >= len(self.keys):
            return Strip.blank(width)
        strip = self._row_strip(index)
        if index == self.cursor_row and self.has_focus:
            strip = strip.apply_style(CURSOR_STYLE)
        return strip.crop(scroll_x, scroll_x + width).extend_cell_length(width)

    # -- cursor ---------------------------------------------------------------------------
    def watch_cursor_row(self, old: int, new: int) -> None:
        # keep the cursor's row in view (below the sticky header)
        self.scroll_to_region(Region(0, new, 1, 2), animate=False)
        self.refresh()

    def action_move(self, step: int) -> None:
        if self.keys:
            self.cursor_row = min(max(0, self.cursor_row + step), len(self.keys) - 1)

    def action_select(self) -> None:
        if self.selected_key is not None:
            self.post_message(self.Selected(self, self.selected_key))

    def on_click(self, event: events.Click) -> None:
        index = int(self.scroll_offset.y) + event.y - 1
        if event.y >= 1 and 0 <= index < len(self.keys):
            self.cursor_row = index
            if event.chain > 1:
                self.action_select()

    def on_focus(self) -> None:
        self.refresh()

    def on_blur(self) -> None:
        self.refresh()
