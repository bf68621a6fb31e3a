"""Alerts (!): the active ones, acknowledged or not, and the past ones with their raised
and cleared times, node, GPU or engine and the value at raise; a to acknowledge."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import ClassVar

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.widgets import DataTable, Static

from alerts import Alert, Severity, value_text
from control.services import describe_error
from store import StoreWriteError
from tui.fasttable import Cell
from tui.messages import AlertsLoaded
from tui.screens.base import BaseScreen
from tui.widgets import ALERT_GLYPH, Row, add_fixed_columns, selected_key, sync_table

ACTIVE_COLUMNS = (
    ("Severity", 10),
    ("Alert", 22),
    ("Node", 10),
    ("On", 16),
    ("Value", 9),
    ("Raised (UTC)", 14),
    ("Ack", 3),
    ("Run", 12),
)
PAST_COLUMNS = (
    ("Severity", 10),
    ("Alert", 22),
    ("Node", 10),
    ("On", 16),
    ("Value", 9),
    ("Raised (UTC)", 14),
    ("Cleared (UTC)", 14),
    ("Run", 12),
)
PAST_WINDOW_S = 7 * 86400.0
"""The past alerts listed: a week's (``infer-top alerts --since`` reads further)."""
PAST_FLUSH_S = 10.0
"""The longest a past-alerts load waits for the store's writer before it reads."""


def stamp(ts: float | None) -> str:
    return "-" if ts is None else datetime.fromtimestamp(ts, UTC).strftime("%m-%d %H:%M:%S")


def severity_cell(alert: Alert) -> Text:
    # the word and the glyph, not the colour alone
    style = {
        Severity.CRITICAL: "bold white on red",
        Severity.WARNING: "bold black on yellow",
    }.get(alert.severity, "bold")
    if alert.acked_at is not None:
        return Text(f"  {alert.severity}", style="dim")
    return Text(f"{ALERT_GLYPH} {alert.severity}", style=style)


def active_rows(alerts: Sequence[Alert]) -> list[Row]:
    return [
        (
            a.id,
            (
                severity_cell(a),
                a.title,
                a.node,
                a.target or "node",
                value_text(a),
                stamp(a.raised_at),
                "yes" if a.acked_at is not None else "no",
                a.run_id or "-",
            ),
        )
        for a in alerts
    ]


def past_rows(alerts: Sequence[Alert]) -> list[Row]:
    return [
        (
            a.id,
            (
                Text(str(a.severity)),
                a.title,
                a.node,
                a.target or "node",
                value_text(a),
                stamp(a.raised_at),
                stamp(a.cleared_at),
                a.run_id or "-",
            ),
        )
        for a in alerts
        if not a.active
    ]


class AlertsScreen(BaseScreen):
    MODE = "alerts"
    AUTO_FOCUS = "#active"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("a", "acknowledge", "Acknowledge"),
    ]

    def body(self) -> ComposeResult:
        yield Static("Active alerts (a: acknowledge the selected one)", classes="section")
        active: DataTable[Cell] = DataTable(id="active", cursor_type="row")
        yield add_fixed_columns(active, ACTIVE_COLUMNS)
        yield Static("", id="alert-message")
        yield Static("Past alerts", classes="section")
        past: DataTable[Cell] = DataTable(id="past", cursor_type="row")
        yield add_fixed_columns(past, PAST_COLUMNS)
        self._loaded_version = -1

    def on_mount(self) -> None:
        self.refresh_fleet()

    def refresh_fleet(self) -> None:
        center = self.top.alerts
        table = self.query_one("#active", DataTable)
        sync_table(table, active_rows(center.active))
        self._show_message()
        if center.version != self._loaded_version:
            self._loaded_version = center.version
            self._load_past()

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        self._show_message()

    def _show_message(self) -> None:
        key = selected_key(self.query_one("#active", DataTable))
        alert = next((a for a in self.top.alerts.active if a.id == key), None)
        text = "" if alert is None else alert.message
        box = self.query_one("#alert-message", Static)
        if str(box.render()) != text:
            box.update(Text(text))

    @work(exclusive=True, group="alerts-load", exit_on_error=False)
    async def _load_past(self) -> None:
        center = self.top.alerts
        store = self.top.services.store
        if store is None:
            self.post_message(AlertsLoaded(list(center.recent)))
            return
        since = self.top.services.clock() - PAST_WINDOW_S

        def read() -> list[Alert]:
            # The change this load answers is queued to the store's writer: read after it
            # is written, or the list misses it until the next alert changes anything.
            with contextlib.suppress(StoreWriteError):  # a full disk is said elsewhere
                store.flush(timeout_s=PAST_FLUSH_S)
            return store.list_alerts(since=since)

        try:
            found = await asyncio.to_thread(read)
        except Exception as exc:
            self.notify(f"cannot read past alerts: {describe_error(exc)}", severity="error")
            found = list(center.recent)
        self.post_message(AlertsLoaded(found))

    def on_alerts_loaded(self, message: AlertsLoaded) -> None:
        sync_table(self.query_one("#past", DataTable), past_rows(message.alerts))

    def action_acknowledge(self) -> None:
        key = selected_key(self.query_one("#active", DataTable))
        if key is None:
            self.notify("no active alert selected", severity="warning")
            return
        self.top.acknowledge(key)
