"""Table helpers, and the GPU and engine tables' columns and cells (Fleet, Node, Engines
and Load test show them), shared by the screens so no screen imports another."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import TypeVar

from rich.text import Text
from textual.widgets import DataTable

from alerts import Alert, Severity
from control.fleet_view import (
    EngineItem,
    GpuItem,
    Item,
    fmt_duration,
    gpus_label,
    model_label,
    node_column_width,
    uptime_s,
)
from control.model import NodeState, fmt, fmt_bytes, gauge, mem_pct, sparkline
from telemetry import EngineTelemetry
from tui.fasttable import Cell

Row = tuple[str, Sequence[Cell]]
"""(key, cells) of one table row."""


def sync_table(table: DataTable[Cell], rows: Sequence[Row]) -> None:
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


def _plain(cell: Cell) -> str:
    return cell.plain if isinstance(cell, Text) else str(cell)


def _style(cell: Cell) -> str:
    return str(cell.style) if isinstance(cell, Text) else ""


def selected_key(table: DataTable[Cell]) -> str | None:
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
    ("Kind", 8),
    ("Model", 18),
    ("State", 8),
    ("Health", 9),
    ("Runtime", 7),
    ("GPUs", 5),
    ("Port", 5),
    ("Up", 6),
    ("KV cache", 13),
    ("Run", 4),
    ("Wait", 4),
    ("tok/s", 6),
    ("TTFT p50", 8),
    ("tok/s history", 13),
)
"""What tells two engines of one kind apart (model, port, GPUs) beside state and health;
the history last, where a narrow terminal scrolls to it."""


def with_node_width(columns: Columns, names: Sequence[str]) -> Columns:
    """``columns`` with the Node column as wide as the fleet's names need, an alert's
    mark ("▲ ") in front of them included."""
    width = node_column_width([f"{ALERT_GLYPH} {name}" for name in names])
    return tuple((label, width if label == "Node" else w) for label, w in columns)


def add_fixed_columns(table: DataTable[Cell], columns: Columns) -> DataTable[Cell]:
    for label, width in columns:
        table.add_column(label, width=width, key=label)
    return table


SPARK_W = 12


def gpu_items(nodes: Sequence[NodeState]) -> list[tuple[str, GpuItem]]:
    return [(f"{n.name}/{g.index}", (n, g)) for n in nodes if n.frame for g in n.frame.gpus]


def gpu_cells(item: GpuItem) -> tuple[Cell, ...]:
    n, g = item
    h = n.gpu_history.get(g.index)
    return (
        n.name,
        str(g.index),
        g.name.replace("NVIDIA ", ""),
        fmt(g.util_pct, "%"),
        Text(sparkline(h.util_pct if h else (), SPARK_W, 0, 100), style="green"),
        f"{fmt_bytes(g.mem_used_bytes)}/{fmt_bytes(g.mem_total_bytes)}",
        fmt(mem_pct(g), "%"),
        fmt(g.power_w, "W"),
        Text(sparkline(h.power_w if h else (), SPARK_W, 0, g.power_limit_w), style="yellow"),
        fmt(g.temp_c, "°C"),
        Text(sparkline(h.temp_c if h else (), SPARK_W, 20, 95), style="red"),
    )


def gpu_rows(nodes: Sequence[NodeState]) -> list[Row]:
    return [(key, gpu_cells(item)) for key, item in gpu_items(nodes)]


def health_cell(health: str) -> Text:
    style = {
        "healthy": "green",
        "loading": "yellow",
        "unhealthy": "bold red",
        "overloaded": "bold magenta",
        "dead": "bold white on red",
    }.get(health, "dim")
    return Text(health, style=style)


def engine_items(nodes: Sequence[NodeState]) -> list[tuple[str, EngineItem]]:
    return [(f"{n.name}/{e.id}", (n, e)) for n in nodes for e in n.engines]


def runtime_cell(e: EngineTelemetry) -> Cell:
    if e.simulated:
        return Text(e.runtime or "sim", style="magenta")
    return e.runtime or "n/a"


def engine_cells(item: EngineItem) -> tuple[Cell, ...]:
    n, e = item
    # 7-cell bar: with " 100%" and the estimate mark "~" it fills the 13-wide column exactly.
    kv = gauge(e.kv_cache_usage, 7) + ("~" if e.kv_cache_usage_is_estimate else "")
    return (
        n.name,
        e.id,
        e.kind,
        model_label(e.model),
        e.state,
        health_cell(e.health),
        runtime_cell(e),
        gpus_label(e.gpu_ids),
        "-" if e.port is None else str(e.port),
        fmt_duration(uptime_s(e, n.frame.ts) if n.frame else None),
        kv,
        fmt(e.requests_running),
        fmt(e.requests_waiting),
        fmt(e.generation_tok_s, "", 0),
        fmt(None if e.ttft_p50_s is None else e.ttft_p50_s * 1000, " ms"),
        Text(sparkline(n.engine_tok_s.get(e.id, ()), SPARK_W), style="cyan"),
    )


def engine_rows(nodes: Sequence[NodeState]) -> list[Row]:
    return [(key, engine_cells(item)) for key, item in engine_items(nodes)]


def when(ts: float | None) -> str:
    """A stored run's time as its lists show it (UTC, to the minute)."""
    if ts is None:
        return "-"
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M")


ALERT_GLYPH = "▲"
"""Marks a row with an active alert: a glyph as well as a colour (never colour only)."""

V = TypeVar("V")


def alert_style(alerts: Sequence[Alert]) -> str:
    critical = any(a.severity is Severity.CRITICAL for a in alerts)
    return "bold white on red" if critical else "bold black on yellow"


def mark_row(cells: Sequence[Cell], alerts: Sequence[Alert]) -> tuple[Cell, ...]:
    """``cells`` with the first one marked "▲ " when ``alerts`` has any."""
    if not alerts:
        return tuple(cells)
    first = cells[0].plain if isinstance(cells[0], Text) else cells[0]
    return (Text(f"{ALERT_GLYPH} {first}", style=alert_style(alerts)), *cells[1:])


Marked = tuple[V, tuple[Alert, ...]]


def with_alerts(item: Item[V], alerts: Sequence[Alert], version: int) -> Item[Marked[V]]:
    """A table item with its row's active alerts (``version``: the alerts', so that the row
    is drawn again when they change)."""
    return Item(item.key, (item.version, version), (item.value, tuple(alerts)))


def marked(cells: Callable[[V], tuple[Cell, ...]]) -> Callable[[Marked[V]], tuple[Cell, ...]]:
    """A FastTable cells function over ``with_alerts`` items."""
    return lambda item: mark_row(cells(item[0]), item[1])
