"""Fleet: every node, GPU and engine at a glance."""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar, TypeVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.widgets import Input, Static

from alerts import Alert
from control.fleet_view import (
    Item,
    NodeRows,
    SortKey,
    by_name,
    engine_value,
    frame_version,
    gpu_value,
    sort_rows,
)
from control.model import (
    NodeState,
    NodeStatus,
    fmt,
    fmt_bytes,
)
from telemetry import EngineTelemetry, GpuSample
from tui.fasttable import Cell, FastTable
from tui.node_add import NodeAddForm
from tui.screens.base import ScreenHost
from tui.screens.shared import FilteredScreen
from tui.widgets import (
    ENGINE_COLUMNS,
    GPU_COLUMNS,
    NODE_COLUMNS,
    Marked,
    engine_cells,
    engine_items,
    gpu_cells,
    gpu_items,
    mark_row,
    marked,
    with_alerts,
    with_node_width,
)

STALE_AFTER_S = 5.0


def status_cell(node: NodeState, now: float, alerts: int = 0) -> Text:
    if alerts and node.status is NodeStatus.OK:
        # the word as well as the row's glyph and colour: the status says why it is marked
        return Text(f"{alerts} alert{'s' if alerts > 1 else ''}", style="bold red")
    if node.status is NodeStatus.ERROR:
        return Text("ERROR", style="bold white on red")
    if node.status is NodeStatus.CONNECTING:
        return Text("connecting", style="yellow")
    if node.last_frame_at is not None and now - node.last_frame_at > STALE_AFTER_S:
        return Text("stale", style="bold yellow")
    return Text("ok", style="green")


def node_note(node: NodeState, now: float) -> str:
    if node.link is not None and not node.link_up:
        return node.link  # the tunnel's state says why more precisely than a refused stream
    if node.status is NodeStatus.ERROR:
        retry = f" (retry in {node.retry_in_s:.0f}s)" if node.retry_in_s else ""
        return f"{node.error}{retry}"
    if node.last_frame_at is None:
        return node.url
    age = max(0.0, now - node.last_frame_at)
    source = "replayed GPUs" if node.frame and node.frame.simulated else "live"
    return f"{source}, frame {age:.0f}s ago"


NodeItem = tuple[NodeState, float]
"""A node and the clock when its row is drawn (its frame's age)."""


def node_cells(item: NodeItem) -> tuple[Cell, ...]:
    n, now = item
    f = n.frame
    host = f.host if f else None
    ram = f"{fmt_bytes(host.ram_used_bytes)}/{fmt_bytes(host.ram_total_bytes)}" if host else "n/a"
    if f is None:
        platform = "?"
    else:
        replayed = f.simulated and f.platform != "replay"
        platform = f"{f.platform} (replay)" if replayed else f.platform
    return (
        Text(n.name, style="bold"),
        status_cell(n, now),
        platform,
        fmt(host.cpu_pct if host else None, "%"),
        ram,
        str(len(f.gpus)) if f else "-",
        str(len(f.engines)) if f else "-",
        node_note(n, now),
    )


def node_item(n: NodeState, now: float) -> Item[NodeItem]:
    # what a node row shows moves with its frame, its state and the age in whole seconds
    return Item(
        n.name,
        (
            frame_version(n),
            n.status,
            n.error,
            n.retry_in_s,
            n.link,
            int(now - n.last_frame_at) if n.last_frame_at else None,
        ),
        (n, now),
    )


def _node_row(item: tuple[NodeItem, tuple[Alert, ...]]) -> tuple[Cell, ...]:
    (node, now), alerts = item
    cells = list(node_cells((node, now)))
    cells[1] = status_cell(node, now, len(alerts))
    return mark_row(cells, alerts)


V = TypeVar("V")


def _engine_matches(engine: EngineTelemetry, text: str) -> bool:
    return text in engine.id.lower() or text in engine.kind.lower()


def _engines_matching(node: NodeState, text: str) -> set[str]:
    return {e.id for e in node.engines if _engine_matches(e, text)}


def _shows(node: NodeState, engine: EngineTelemetry, text: str) -> bool:
    """An engine row under the filter: its node's name, or its own id or kind, matches."""
    return not text or text in node.name.lower() or _engine_matches(engine, text)


def _shows_gpu(node: NodeState, gpu: GpuSample, text: str) -> bool:
    """A GPU row under the filter: its node's name matches, or an engine it runs does."""
    if not text or text in node.name.lower():
        return True
    matching = _engines_matching(node, text)
    return any(p.engine in matching for p in gpu.processes)


class FleetScreen(FilteredScreen):
    MODE = "fleet"
    AUTO_FOCUS = "#nodes"
    FILTER_TARGET = "#nodes"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "open_node", "Open node", show=False),
        Binding("o", "cycle_sort", "Sort"),
        Binding("a", "add_node", "Add node"),
    ]
    sort_key = SortKey.NODE
    _node_names: tuple[str, ...] | None = None

    def body(self) -> ComposeResult:
        yield Input(
            placeholder="filter nodes, GPUs, engines (esc clears)", id="filter", classes="hidden"
        )
        yield Static("Nodes", classes="section")
        yield FastTable(NODE_COLUMNS, _node_row, id="nodes")
        yield Static("", id="node-errors", classes="hidden")
        yield Static(self._section("GPUs"), id="gpus-title", classes="section")
        yield FastTable(GPU_COLUMNS, marked(gpu_cells), id="gpus")
        yield Static(self._section("Engines"), id="engines-title", classes="section")
        yield FastTable(ENGINE_COLUMNS, marked(engine_cells), id="engines")

    def __init__(self, top: ScreenHost) -> None:
        super().__init__(top)
        self._gpu_rows = NodeRows(lambda node: gpu_items([node]))
        self._engine_rows = NodeRows(lambda node: engine_items([node]))

    def on_mount(self) -> None:
        self.refresh_fleet()

    def _section(self, title: str) -> str:
        return f"{title}  (sorted by {self.sort_key}; o cycles)"

    def action_cycle_sort(self) -> None:
        self.sort_key = self.sort_key.next()
        self.query_one("#gpus-title", Static).update(self._section("GPUs"))
        self.query_one("#engines-title", Static).update(self._section("Engines"))
        self.refresh_fleet()

    def _filter_text(self) -> str:
        return self.query_one("#filter", Input).value.strip().lower()

    def _filtered(self) -> list[NodeState]:
        text = self._filter_text()
        nodes = list(self.top.model.nodes.values())
        if not text:
            return nodes
        return [n for n in nodes if text in n.name.lower() or _engines_matching(n, text)]

    def refresh_fleet(self) -> None:
        """The tables' rows in order; each table makes the items of the rows it draws only
        (module ``tui.fasttable``), so what a redraw costs here is per node, not per row."""
        wanted = self._filter_text()
        nodes = by_name(self._filtered())
        now = self.top.services.clock()
        center = self.top.alerts

        def node_row(index: int) -> Item[tuple[NodeItem, tuple[Alert, ...]]]:
            node = nodes[index]
            alerts = [a for found in center.marks(node.name).values() for a in found]
            return with_alerts(node_item(node, now), alerts, center.version)

        def alerted(rows: list[Item[V]], target: str) -> Callable[[int], Item[Marked[V]]]:
            def row(index: int) -> Item[Marked[V]]:
                node, _, rest = rows[index].key.partition("/")
                alerts = center.marks(node).get(target.format(rest), ())
                return with_alerts(rows[index], alerts, center.version)

            return row

        nodes_table = self.query_one("#nodes", FastTable)
        nodes_table.set_rows([n.name for n in nodes], node_row)
        errors = [f"{n.name}: {node_note(n, now)}" for n in nodes if n.status is NodeStatus.ERROR]
        box = self.query_one("#node-errors", Static)
        box.set_class(not errors, "hidden")
        text = "\n".join(errors[:3]) + (
            f"\n… and {len(errors) - 3} more" if len(errors) > 3 else ""
        )
        if str(box.render()) != text:
            box.update(Text(text, style="bold red"))
        self._fit_node_column(tuple(self.top.model.nodes))
        gpus = self._gpu_rows.rows(nodes)
        if wanted:
            gpus = [r for r in gpus if _shows_gpu(*r.value, wanted)]
        gpus = sort_rows(gpus, self.sort_key, lambda key, row: gpu_value(key, row.value))
        self.query_one("#gpus", FastTable).set_rows([r.key for r in gpus], alerted(gpus, "gpu{}"))
        engines = self._engine_rows.rows(nodes)
        if wanted:
            engines = [r for r in engines if _shows(*r.value, wanted)]
        engines = sort_rows(engines, self.sort_key, lambda key, row: engine_value(key, row.value))
        self.query_one("#engines", FastTable).set_rows(
            [r.key for r in engines], alerted(engines, "engine {}")
        )

    def _fit_node_column(self, names: tuple[str, ...]) -> None:
        """Every table's Node column as wide as the fleet's names (all of them: a filter
        does not move the columns), measured when the names change."""
        if names == self._node_names:
            return
        self._node_names = names
        for table_id, columns in (
            ("#nodes", NODE_COLUMNS),
            ("#gpus", GPU_COLUMNS),
            ("#engines", ENGINE_COLUMNS),
        ):
            self.query_one(table_id, FastTable).set_columns(with_node_width(columns, names))

    def action_clear_filter(self) -> None:
        super().action_clear_filter()
        self.refresh_fleet()

    def on_input_changed(self, event: Input.Changed) -> None:
        self.refresh_fleet()

    def on_fast_table_selected(self, event: FastTable.Selected) -> None:
        self.top.open_node(event.key.split("/", 1)[0])

    def action_open_node(self) -> None:
        key = self.query_one("#nodes", FastTable).selected_key
        if key:
            self.top.open_node(key)

    def action_add_node(self) -> None:
        self.app.push_screen(NodeAddForm(self.top))
