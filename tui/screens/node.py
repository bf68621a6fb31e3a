"""Node: per-GPU charts over minutes, the node's engines and their logs, and the
processes holding each GPU's memory (nvitop's process list)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import ClassVar

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Grid, Horizontal, Vertical
from textual.widgets import DataTable, Log, Static

from control.model import GpuHistory, NodeState, NodeStatus, fmt_bytes
from control.nodes import AgentLike
from control.services import describe_error
from tui.charts import Chart, ChartData, series_of
from tui.fasttable import Cell
from tui.messages import LogLine
from tui.screens.base import BaseScreen
from tui.widgets import (
    ALERT_GLYPH,
    ENGINE_COLUMNS,
    Columns,
    Row,
    add_fixed_columns,
    engine_rows,
    mark_row,
    selected_key,
    sync_table,
)

GpuField = Callable[[GpuHistory], Sequence[float | None]]
CHARTS: tuple[tuple[str, str, GpuField, float | None, float], ...] = (
    # id, title, the GpuHistory field, y max, least y span (a flat line looks flat)
    ("util", "GPU util %", lambda h: h.util_pct, 100.0, 0.0),
    ("mem", "memory used %", lambda h: h.mem_pct, 100.0, 0.0),
    ("power", "power W", lambda h: h.power_w, None, 50.0),
    ("temp", "temperature °C", lambda h: h.temp_c, None, 10.0),
)


def chart_data(
    title: str,
    field: GpuField,
    ymax: float | None,
    histories: dict[int, GpuHistory],
    min_span: float = 0.0,
) -> ChartData:
    """One GPU field over time, one series per GPU, x in seconds before the newest frame."""
    newest = max((h.ts[-1] for h in histories.values() if h.ts), default=None)
    series = (
        series_of(f"gpu{index}", (t - newest for t in hist.ts), field(hist))
        for index, hist in sorted(histories.items())
        if newest is not None
    )
    return ChartData(
        title,
        tuple(s for s in series if s is not None),
        xlabel="seconds before the newest frame",
        ylim=None if ymax is None else (0.0, ymax),
        min_span=min_span,
    )


PROCESS_COLUMNS: Columns = (
    ("GPU", 3),
    ("PID", 8),
    ("Type", 4),
    ("Engine", 12),
    ("Process", 16),
    ("GPU memory", 10),
)


def process_rows(node: NodeState) -> list[Row]:
    """Every GPU's processes, GPU by GPU, the largest holder first; a process no engine
    of the node owns is "other" (in words: its dimming is not the only sign)."""
    gpus = node.frame.gpus if node.frame else ()
    rows: list[Row] = []
    for gpu in gpus:
        for p in sorted(gpu.processes, key=lambda p: -(p.mem_used_bytes or 0)):
            engine = Text(p.engine) if p.engine else Text("other", style="dim")
            cells = (
                str(gpu.index),
                str(p.pid),
                p.usage,
                engine,
                p.name or "n/a",
                fmt_bytes(p.mem_used_bytes),
            )
            rows.append((f"{gpu.index}/{p.pid}", cells))
    return rows


class NodeScreen(BaseScreen):
    MODE = "node"
    AUTO_FOCUS = "#node-engines"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("left_square_bracket", "cycle(-1)", "Prev node", key_display="["),
        Binding("right_square_bracket", "cycle(1)", "Next node", key_display="]"),
        Binding("f", "follow_logs", "Follow logs"),
    ]

    def body(self) -> ComposeResult:
        yield Static("", id="node-title", classes="section")
        with Grid(id="charts"):
            for chart_id, *_ in CHARTS:
                yield Chart(id=f"chart-{chart_id}")
        with Horizontal(id="node-lower"):
            with Vertical(id="node-tables"):
                engines: DataTable[Cell] = DataTable(id="node-engines", cursor_type="row")
                add_fixed_columns(engines, ENGINE_COLUMNS)
                yield engines
                procs: DataTable[Cell] = DataTable(id="gpu-processes", cursor_type="row")
                add_fixed_columns(procs, PROCESS_COLUMNS)
                yield procs
            with Vertical(id="log-pane"):
                yield Static("logs: select an engine and press f", id="log-title")
                yield Log(id="engine-log", max_lines=2000)
        self._following: str | None = None

    def on_mount(self) -> None:
        self.refresh_fleet()

    def _node(self) -> NodeState | None:
        model = self.top.model
        name = self.top.selected_node
        if name is None and model.nodes:
            name = next(iter(model.nodes))
            self.top.selected_node = name
        return model.nodes.get(name) if name else None

    def refresh_fleet(self) -> None:
        node = self._node()
        title = self.query_one("#node-title", Static)
        if node is None:
            title.update("No node configured.")
            return
        state = "ERROR: " + (node.error or "") if node.status is NodeStatus.ERROR else ""
        frame = node.frame
        label = f"Node {node.name}"
        if frame is not None:
            label += f"  ({frame.platform}{', replayed telemetry' if frame.simulated else ''}"
            label += f", {len(frame.gpus)} GPU(s))"
        marks = self.top.alerts.marks(node.name)
        found = [a for alerts in marks.values() for a in alerts]
        if found:
            shown = ", ".join(f"{a.title} ({a.target or 'node'})" for a in found[:3])
            state += f" {ALERT_GLYPH} {len(found)} alert{'s' if len(found) > 1 else ''}: {shown}"
        title.update(f"{label}  {state}".rstrip())
        for chart_id, chart_title, field, ymax, min_span in CHARTS:
            self.query_one(f"#chart-{chart_id}", Chart).show(
                chart_data(chart_title, field, ymax, node.gpu_history, min_span)
            )
        rows = [
            (key, mark_row(cells, marks.get(f"engine {key.split('/', 1)[1]}", [])))
            for key, cells in engine_rows([node])
        ]
        sync_table(self.query_one("#node-engines", DataTable), rows)
        sync_table(self.query_one("#gpu-processes", DataTable), process_rows(node))

    def action_cycle(self, step: int) -> None:
        names = list(self.top.model.nodes)
        if not names:
            return
        current = self.top.selected_node
        i = names.index(current) if current in names else 0
        self.top.selected_node = names[(i + step) % len(names)]
        self.refresh_fleet()

    def action_follow_logs(self) -> None:
        key = selected_key(self.query_one("#node-engines", DataTable))
        node = self._node()
        if key is None or node is None:
            self.notify("select an engine first", severity="warning")
            return
        engine_id = key.split("/", 1)[1]
        handle = self.top.services.node(node.name)
        if handle is None or handle.client is None:
            self.notify(f"no agent client for {node.name}", severity="error")
            return
        self._following = engine_id
        log = self.query_one("#engine-log", Log)
        log.clear()
        self.query_one("#log-title", Static).update(f"logs of {engine_id} (following)")
        self._follow(handle.client, engine_id)

    @work(exclusive=True, group="logs", exit_on_error=False)
    async def _follow(self, client: AgentLike, engine_id: str) -> None:
        try:
            async for line in client.logs(engine_id, tail=200, follow=True):
                self.post_message(LogLine(engine_id, line))
        except Exception as exc:  # the agent's error in words, in the log pane
            self.post_message(LogLine(engine_id, f"[log stream ended: {describe_error(exc)}]"))

    def on_log_line(self, message: LogLine) -> None:
        if message.engine_id == self._following:
            self.query_one("#engine-log", Log).write_line(message.line.rstrip("\n"))
