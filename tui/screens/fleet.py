"""Fleet: every node, GPU and engine at a glance."""

from __future__ import annotations

from typing import Any, ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.widgets import DataTable, Input, Static

from tui.model import (
    NodeState,
    NodeStatus,
    fmt,
    fmt_bytes,
    gauge,
    mem_pct,
    sparkline,
)
from tui.screens.base import BaseScreen
from tui.widgets import (
    ENGINE_COLUMNS,
    GPU_COLUMNS,
    NODE_COLUMNS,
    Row,
    add_fixed_columns,
    selected_key,
    sync_table,
)

SPARK_W = 12
STALE_AFTER_S = 5.0


def status_cell(node: NodeState, now: float) -> Text:
    if node.status is NodeStatus.ERROR:
        return Text("ERROR", style="bold white on red")
    if node.status is NodeStatus.CONNECTING:
        return Text("connecting", style="yellow")
    if node.last_frame_at is not None and now - node.last_frame_at > STALE_AFTER_S:
        return Text("stale", style="bold yellow")
    return Text("ok", style="green")


def node_note(node: NodeState, now: float) -> str:
    if node.status is NodeStatus.ERROR:
        retry = f" (retry in {node.retry_in_s:.0f}s)" if node.retry_in_s else ""
        return f"{node.error}{retry}"
    if node.last_frame_at is None:
        return node.url
    age = max(0.0, now - node.last_frame_at)
    source = "replayed H200 trace" if node.frame and node.frame.simulated else "live"
    return f"{source}, last frame {age:.0f}s ago"


def node_rows(nodes: list[NodeState], now: float) -> list[Row]:
    rows: list[Row] = []
    for n in nodes:
        f = n.frame
        host = f.host if f else None
        ram = (
            f"{fmt_bytes(host.ram_used_bytes)}/{fmt_bytes(host.ram_total_bytes)}" if host else "n/a"
        )
        platform = (
            "?"
            if f is None
            else (
                f"{f.platform} (replay)" if f.simulated and f.platform != "replay" else f.platform
            )
        )
        rows.append(
            (
                n.name,
                (
                    Text(n.name, style="bold"),
                    status_cell(n, now),
                    platform,
                    fmt(host.cpu_pct if host else None, "%"),
                    ram,
                    str(len(f.gpus)) if f else "-",
                    str(len(f.engines)) if f else "-",
                    node_note(n, now),
                ),
            )
        )
    return rows


def gpu_rows(nodes: list[NodeState]) -> list[Row]:
    rows: list[Row] = []
    for n in nodes:
        if n.frame is None:
            continue
        for g in n.frame.gpus:
            h = n.gpu_history.get(g.index)
            rows.append(
                (
                    f"{n.name}/{g.index}",
                    (
                        n.name,
                        str(g.index),
                        g.name.replace("NVIDIA ", ""),
                        fmt(g.util_pct, "%"),
                        Text(sparkline(h.util_pct if h else (), SPARK_W, 0, 100), style="green"),
                        f"{fmt_bytes(g.mem_used_bytes)}/{fmt_bytes(g.mem_total_bytes)}",
                        fmt(mem_pct(g), "%"),
                        fmt(g.power_w, "W"),
                        Text(
                            sparkline(h.power_w if h else (), SPARK_W, 0, g.power_limit_w),
                            style="yellow",
                        ),
                        fmt(g.temp_c, "°C"),
                        Text(sparkline(h.temp_c if h else (), SPARK_W, 20, 95), style="red"),
                    ),
                )
            )
    return rows


def health_cell(health: str) -> Text:
    style = {
        "healthy": "green",
        "loading": "yellow",
        "unhealthy": "bold red",
        "dead": "bold white on red",
    }.get(health, "dim")
    return Text(health, style=style)


def engine_rows(nodes: list[NodeState]) -> list[Row]:
    rows: list[Row] = []
    for n in nodes:
        for e in n.engines:
            kv = gauge(e.kv_cache_usage, 8) + ("~" if e.kv_cache_usage_is_estimate else "")
            rows.append(
                (
                    f"{n.name}/{e.id}",
                    (
                        n.name,
                        e.id,
                        e.kind + (" SIM" if e.simulated else ""),
                        e.state,
                        health_cell(e.health),
                        kv,
                        fmt(e.requests_running),
                        fmt(e.requests_waiting),
                        fmt(e.generation_tok_s, "", 0),
                        Text(sparkline(n.engine_tok_s.get(e.id, ()), SPARK_W), style="cyan"),
                        fmt(None if e.ttft_p50_s is None else e.ttft_p50_s * 1000, " ms"),
                    ),
                )
            )
    return rows


class FleetScreen(BaseScreen):
    MODE = "fleet"
    AUTO_FOCUS = "#nodes"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("slash", "filter", "Filter", key_display="/"),
        Binding("escape", "clear_filter", "Clear filter", show=False),
        Binding("enter", "open_node", "Open node", show=False),
    ]

    def body(self) -> ComposeResult:
        yield Input(
            placeholder="filter nodes, GPUs, engines (esc clears)", id="filter", classes="hidden"
        )
        yield Static("Nodes", classes="section")
        nodes: DataTable[Any] = DataTable(id="nodes", cursor_type="row")
        add_fixed_columns(nodes, NODE_COLUMNS)
        yield nodes
        yield Static("GPUs", classes="section")
        gpus: DataTable[Any] = DataTable(id="gpus", cursor_type="row")
        add_fixed_columns(gpus, GPU_COLUMNS)
        yield gpus
        yield Static("Engines", classes="section")
        engines: DataTable[Any] = DataTable(id="engines", cursor_type="row")
        add_fixed_columns(engines, ENGINE_COLUMNS)
        yield engines

    def on_mount(self) -> None:
        self.refresh_fleet()

    def _filtered(self) -> list[NodeState]:
        text = self.query_one("#filter", Input).value.strip().lower()
        nodes = list(self.top.model.nodes.values())
        if not text:
            return nodes
        return [
            n
            for n in nodes
            if text in n.name.lower()
            or any(text in e.id.lower() or text in e.kind.lower() for e in n.engines)
        ]

    def refresh_fleet(self) -> None:
        nodes = self._filtered()
        now = self.top.services.clock()
        sync_table(self.query_one("#nodes", DataTable), node_rows(nodes, now))
        sync_table(self.query_one("#gpus", DataTable), gpu_rows(nodes))
        sync_table(self.query_one("#engines", DataTable), engine_rows(nodes))

    def action_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.remove_class("hidden")
        box.focus()

    def action_clear_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.value = ""
        box.add_class("hidden")
        self.query_one("#nodes", DataTable).focus()
        self.refresh_fleet()

    def on_input_changed(self, event: Input.Changed) -> None:
        self.refresh_fleet()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.query_one("#nodes", DataTable).focus()

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        key = str(event.row_key.value or "")
        self.top.open_node(key.split("/", 1)[0])

    def action_open_node(self) -> None:
        key = selected_key(self.query_one("#nodes", DataTable))
        if key:
            self.top.open_node(key)
