"""History: stored runs — filter, open, delete, export."""

from __future__ import annotations

import asyncio
from typing import ClassVar

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.widgets import DataTable, Input, Static

from control.exporting import export_comparison
from control.model import fmt
from control.services import describe_error
from runs.records import token_deviations
from store import RunInfo
from tui.fasttable import Cell
from tui.messages import LevelsLoaded, RunsChanged, RunsLoaded
from tui.screens.shared import Confirm, FilteredScreen, RunsScreen
from tui.widgets import Row, add_fixed_columns, selected_key, sync_table, when

RUN_COLUMNS = (
    ("Run", 12),
    ("Name", 14),
    ("Engine", 13),
    ("Node", 12),
    ("Created (UTC)", 16),
    ("Levels", 6),
    ("Requests", 8),
    ("Status", 10),
)
LEVEL_COLUMNS = (
    ("Conc.", 5),
    ("Rate", 7),
    ("OK", 6),
    ("Failed", 6),
    ("Incompl.", 8),
    ("out tok/s", 9),
    ("TTFT p50 ms", 11),
    ("TTFT p99 ms", 11),
    ("ITL p50 ms", 10),
    ("ITL p99 ms", 10),
    ("tok/J", 6),
)


def run_rows(runs: list[RunInfo], text: str) -> list[Row]:
    text = text.strip().lower()
    rows: list[Row] = []
    for r in runs:
        hay = f"{r.run_id} {r.name or ''} {r.engine_kind or ''} {r.node or ''}".lower()
        if text and text not in hay:
            continue
        rows.append(
            (
                r.run_id,
                (
                    r.run_id[:12],
                    r.name or "-",
                    (r.engine_kind or "?") + (" SIM" if r.simulated else ""),
                    r.node or "-",
                    when(r.created_at),
                    str(r.level_count),
                    str(r.request_count),
                    r.status,
                ),
            )
        )
    return rows


class HistoryScreen(FilteredScreen, RunsScreen):
    MODE = "history"
    AUTO_FOCUS = "#runs"
    FILTER_TARGET = "#runs"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("d", "delete", "Delete"),
        Binding("e", "export", "Export"),
        Binding("o", "open", "Open"),
    ]

    def body(self) -> ComposeResult:
        yield Static("", id="startup", classes="hidden")
        yield Input(
            placeholder="filter runs by id, name, engine, node", id="filter", classes="hidden"
        )
        yield Static("Stored runs", classes="section")
        runs: DataTable[Cell] = DataTable(id="runs", cursor_type="row")
        add_fixed_columns(runs, RUN_COLUMNS)
        yield runs
        yield Static("Levels of the opened run (enter)", classes="section", id="levels-title")
        levels: DataTable[Cell] = DataTable(id="levels", cursor_type="row")
        add_fixed_columns(levels, LEVEL_COLUMNS)
        yield levels
        self._runs: list[RunInfo] = []

    def on_runs_loaded(self, message: RunsLoaded) -> None:
        if message.runs is None:
            self.query_one("#levels-title", Static).update("No run store is configured.")
            return
        self._runs = message.runs
        text = self.query_one("#filter", Input).value
        sync_table(self.query_one("#runs", DataTable), run_rows(self._runs, text))

    def on_input_changed(self, event: Input.Changed) -> None:
        sync_table(self.query_one("#runs", DataTable), run_rows(self._runs, event.value))

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        if event.data_table.id == "runs" and event.row_key.value:
            self.open_run(str(event.row_key.value))

    def action_open(self) -> None:
        key = selected_key(self.query_one("#runs", DataTable))
        if key:
            self.open_run(key)

    @work(exclusive=True, group="history-open", exit_on_error=False)
    async def open_run(self, run_id: str) -> None:
        store = self.top.services.store
        if store is None:
            return
        try:
            levels = await asyncio.to_thread(store.levels, run_id)
        except Exception as exc:
            self.notify(f"cannot open {run_id}: {describe_error(exc)}", severity="error")
            return
        self.post_message(LevelsLoaded(run_id, levels))

    def on_levels_loaded(self, message: LevelsLoaded) -> None:
        title = f"Levels of run {message.run_id}"
        for warning in token_deviations(lr.summary for lr in message.levels):
            title += f"\nwarning: {warning}"  # the workload sent is not the one asked for
        self.query_one("#levels-title", Static).update(Text(title))
        rows: list[Row] = []
        for lr in message.levels:
            s = lr.summary
            rows.append(
                (
                    str(s.level_index),
                    (
                        fmt(s.concurrency),
                        fmt(s.request_rate, "/s", 1),
                        str(s.completed),
                        str(s.failed),
                        str(s.incomplete),
                        fmt(s.output_tok_s),
                        fmt(_ms(s.ttft_s.p50)),
                        fmt(_ms(s.ttft_s.p99)),
                        fmt(_ms(s.itl_s.p50), "", 1),
                        fmt(_ms(s.itl_s.p99), "", 1),
                        fmt(s.output_tok_per_j, "", 2),
                    ),
                )
            )
        sync_table(self.query_one("#levels", DataTable), rows)

    def action_delete(self) -> None:
        key = selected_key(self.query_one("#runs", DataTable))
        if key is None:
            return

        def done(confirmed: bool | None) -> None:
            if confirmed:
                self._delete(key)

        self.app.push_screen(
            Confirm(f"Delete run {key[:12]} and all its requests?", "Delete", "Keep"), done
        )

    @work(group="history-delete", exit_on_error=False)
    async def _delete(self, run_id: str) -> None:
        store = self.top.services.store
        if store is None:
            return
        try:
            await asyncio.to_thread(store.delete_run, run_id)
        except Exception as exc:
            self.notify(f"delete failed: {describe_error(exc)}", severity="error")
            return
        self.notify(f"deleted run {run_id[:12]}")
        self.app.post_message(RunsChanged())

    def action_export(self) -> None:
        key = selected_key(self.query_one("#runs", DataTable))
        if key is not None:
            self._export([key])

    @work(group="history-export", exit_on_error=False)
    async def _export(self, run_ids: list[str]) -> None:
        try:
            path = await asyncio.to_thread(export_comparison, self.top.services, run_ids, "md")
        except Exception as exc:
            self.notify(f"export failed: {describe_error(exc)}", severity="error")
            return
        self.notify(f"exported to {path}")


def _ms(value: float | None) -> float | None:
    return None if value is None else value * 1000
