"""Small widget helpers shared by the screens."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

from rich.text import Text
from textual.widgets import DataTable

Row = tuple[str, Sequence[Any]]
T = TypeVar("T")


def sync_table(table: DataTable[Any], rows: Sequence[Row]) -> None:
    """Make ``table`` show ``rows`` (key, cells), touching only what changed.

    Rebuilding a table on every frame would reset the cursor and redraw every
    cell; updating changed cells keeps the operator's place and costs little.
    """
    wanted = [key for key, _ in rows]
    present = [str(k.value) for k in table.rows]
    if present != wanted:
        cursor = table.cursor_row
        table.clear()
        for key, cells in rows:
            table.add_row(*cells, key=key)
        if rows:
            table.move_cursor(row=min(cursor, len(rows) - 1), animate=False)
        return
    columns = list(table.columns)
    for key, cells in rows:
        current = table.get_row(key)
        for col, (old, new) in enumerate(zip(current, cells, strict=False)):
            if _plain(old) != _plain(new) or _style(old) != _style(new):
                table.update_cell(key, columns[col], new, update_width=False)


def _plain(cell: Any) -> str:
    return cell.plain if isinstance(cell, Text) else str(cell)


def _style(cell: Any) -> str:
    return str(cell.style) if isinstance(cell, Text) else ""


def selected_key(table: DataTable[Any]) -> str | None:
    if table.row_count == 0:
        return None
    try:
        row_key, _ = table.coordinate_to_cell_key(table.cursor_coordinate)
    except Exception:  # the cursor points past a table that just shrank
        return None
    return None if row_key.value is None else str(row_key.value)


Columns = Sequence[tuple[str, int]]
"""(label, width in cells): fixed widths, so a table's look never depends on when
its rows arrived (auto widths are measured lazily) and no cell is re-measured."""

NODE_COLUMNS: Columns = (
    ("Node", 10),
    ("Status", 10),
    ("Platform", 15),
    ("CPU", 4),
    ("RAM", 14),
    ("GPUs", 4),
    ("Engines", 7),
    ("Note", 37),
)
GPU_COLUMNS: Columns = (
    ("Node", 10),
    ("#", 2),
    ("GPU", 5),
    ("Util", 4),
    ("util history", 12),
    ("Memory", 13),
    ("Mem", 4),
    ("Power", 5),
    ("power history", 13),
    ("Temp", 5),
    ("temp history", 12),
)
ENGINE_COLUMNS: Columns = (
    ("Node", 10),
    ("Engine", 10),
    ("Kind", 12),
    ("State", 8),
    ("Health", 9),
    ("KV cache", 13),
    ("Run", 4),
    ("Wait", 4),
    ("tok/s", 6),
    ("tok/s history", 13),
    ("TTFT p50", 8),
)


def add_fixed_columns(table: DataTable[Any], columns: Columns) -> DataTable[Any]:
    for label, width in columns:
        table.add_column(label, width=width, key=label)
    return table
