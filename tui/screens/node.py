"""Node: per-GPU charts over minutes, the node's engines and their logs, and the
processes holding each GPU's memory (nvitop's process list)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import ClassVar

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Grid, Horizontal, Vertical, VerticalScroll
from textual.widgets import DataTable, Log, Static

from control.fleet_view import DETAIL_LOG_LINES, engine_detail
from control.model import GpuHistory, NodeState, NodeStatus, fmt_bytes
from control.nodes import AgentLike
from control.services import describe_error
from telemetry import EngineTelemetry
from tui.charts import Chart, ChartData, series_of
from tui.fasttable import Cell
from tui.messages import EngineDetailLoaded, LogLine
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
                with VerticalScroll(id="engine-detail-box"):
                    yield Static("select an engine for its details", id="engine-detail")
                yield Static("logs: select an engine and press f", id="log-title")
                yield Log(id="engine-log", max_lines=2000)
        self._following: str | None = None
        self._detail: tuple[str, str, object] | None = None
        """(node, engine id, what its row showed) the detail pane was last fetched for."""
        self._answer: EngineDetailLoaded | None = None

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
            (key, mark_row(cells, marks.get(f"engine {key.split('/', 1)[1]}", ())))
            for key, cells in engine_rows([node])
        ]
        sync_table(self.query_one("#node-engines", DataTable), rows)
        sync_table(self.query_one("#gpu-processes", DataTable), process_rows(node))
        self._show_detail(node)

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        node = self._node()
        if event.data_table.id == "node-engines" and node is not None:
            self._show_detail(node)

    def _selected(self, node: NodeState) -> EngineTelemetry | None:
        key = selected_key(self.query_one("#node-engines", DataTable))
        engine_id = key.split("/", 1)[1] if key else None
        return next((e for e in node.engines if e.id == engine_id), None)

    def _show_detail(self, node: NodeState) -> None:
        """The selected engine's detail: drawn from its row now, the agent asked again for
        its config and log when the selection or the engine's state changes (a crash)."""
        engine = self._selected(node)
        if engine is None:
            return
        wanted = (node.name, engine.id, (engine.state, engine.health, engine.exit_code))
        if wanted != self._detail:
            self._detail = wanted
            self._answer = None
            self._fetch_detail(wanted)
        answer = self._answer
        lines = engine_detail(
            engine,
            node.frame.ts if node.frame else None,
            answer.info if answer else None,
            answer.log_lines if answer else [],
            answer.note if answer else "asking the agent for its config and log…",
        )
        text = "\n".join(lines)
        box = self.query_one("#engine-detail", Static)
        if str(box.render()) != text:
            box.update(Text(text))

    @work(exclusive=True, group="engine-detail", exit_on_error=False)
    async def _fetch_detail(self, asked_for: tuple[str, str, object]) -> None:
        node, engine_id, _ = asked_for
        handle = self.top.services.node(node)
        if handle is None or handle.client is None:
            note = f"config and log: no agent client for {node}"
            self.post_message(EngineDetailLoaded(asked_for, None, [], note))
            return
        try:
            info = next((e for e in await handle.client.engines() if e.id == engine_id), None)
            lines = [line async for line in handle.client.logs(engine_id, DETAIL_LOG_LINES)]
        except Exception as exc:  # the agent's words in the pane, the screen goes on
            note = f"config and log: {describe_error(exc)}"
            self.post_message(EngineDetailLoaded(asked_for, None, [], note))
            return
        self.post_message(EngineDetailLoaded(asked_for, info, lines))

    def on_engine_detail_loaded(self, message: EngineDetailLoaded) -> None:
        if message.asked_for != self._detail:
            return  # an answer for an engine no longer selected, or from before it changed
        self._answer = message
        node = self._node()
        if node is not None:
            self._show_detail(node)

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
