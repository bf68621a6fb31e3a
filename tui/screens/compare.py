"""Compare: pick runs, see them side by side (table and curves), export."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import ClassVar

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.widgets import DataTable, SelectionList, Static
from textual.widgets.selection_list import Selection

from control.compare_view import (
    CompareTable,
    Curve,
    comparison_curves,
    comparison_table,
    levels_table,
)
from control.exporting import export_comparison
from control.regression import DEFAULT_THRESHOLD, check_regression
from control.regression_view import findings, regression_table
from control.report_data import report_of
from control.services import describe_error
from store import Comparison, RunInfo
from store.labels import base_label
from tui.charts import Chart, ChartData, series_of
from tui.messages import ComparisonLoaded, RegressionChecked, RunsLoaded
from tui.screens.shared import RunsScreen
from tui.widgets import when


def default_pick(runs: Sequence[RunInfo], limit: int = 6) -> list[str]:
    """The newest finished run of each engine kind: a useful first comparison."""
    picked: dict[str, str] = {}
    for r in runs:  # newest first
        kind = r.engine_kind or "?"
        if r.status == "completed" and kind not in picked and r.level_count:
            picked[kind] = r.run_id
    return list(picked.values())[:limit]


CURVE_CHARTS: tuple[tuple[str, str, Callable[[Curve], Sequence[float | None]], str], ...] = (
    # chart id, title, the curve's y values, y label
    ("#curve-tps", "throughput vs concurrency", lambda c: c.output_tok_s, "output tok/s"),
    ("#curve-ttft", "TTFT p50 vs concurrency", lambda c: c.ttft_p50_ms, "ms"),
)


class CompareScreen(RunsScreen):
    MODE = "compare"
    AUTO_FOCUS = "#pick"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("m", "export('md')", "Export md"),
        Binding("c", "export('csv')", "Export csv"),
        Binding("j", "export('json')", "Export json"),
        Binding("h", "export('html')", "Report"),
        Binding("l", "toggle_levels", "Levels"),
        Binding("b", "baseline", "Baseline"),
    ]

    def body(self) -> ComposeResult:
        yield Static("", id="startup", classes="hidden")
        yield Static("Comparison", classes="section", id="compare-title")
        yield DataTable(id="compare-table", cursor_type="row")
        yield DataTable(id="compare-levels", cursor_type="row", classes="hidden")
        yield DataTable(id="compare-regression", cursor_type="row", classes="hidden")
        with Horizontal(id="compare-lower"):
            with Vertical(id="compare-pick"):
                yield Static("Runs (space picks)", classes="section", id="pick-title")
                yield SelectionList[str](id="pick", compact=True)
            yield Chart(id="curve-tps")
            yield Chart(id="curve-ttft")
        self._runs: list[RunInfo] = []
        self._picked_once = False
        self._shown = "#compare-table"
        """The table in view: the summary, every level, or a regression check."""
        self._regression: tuple[CompareTable, list[str]] | None = None
        """The last regression check's table and findings."""
        self._views: tuple[Comparison | None, CompareTable | None, CompareTable | None] = (
            None,
            None,
            None,
        )
        """The comparison shown, its summary and its levels table."""

    def on_runs_loaded(self, message: RunsLoaded) -> None:
        runs = message.runs
        if runs is None:
            self.query_one("#compare-title", Static).update("No run store is configured.")
            return
        pick = self.query_one("#pick", SelectionList)
        chosen = set(pick.selected)
        if not self._picked_once and not chosen and runs:
            chosen = set(default_pick(runs))
            self._picked_once = bool(chosen)
        self._runs = runs
        with pick.prevent(SelectionList.SelectedChanged):
            pick.clear_options()
            pick.add_options(
                [
                    Selection(
                        f"{base_label(r)} · {when(r.created_at)[5:]}",
                        r.run_id,
                        r.run_id in chosen,
                    )
                    for r in runs
                ]
            )
            if runs:  # space toggles the highlighted run: start on the first
                pick.highlighted = 0
        self._count_picks(len(chosen & {r.run_id for r in runs}))
        self.show_comparison([r.run_id for r in runs if r.run_id in chosen])

    def on_selection_list_selected_changed(self, event: SelectionList.SelectedChanged[str]) -> None:
        selected = set(event.selection_list.selected)
        self._count_picks(len(selected))
        self.show_comparison([r.run_id for r in self._runs if r.run_id in selected])

    def _count_picks(self, picked: int) -> None:
        self.query_one("#pick-title", Static).update(
            f"Runs: {picked} of {len(self._runs)} picked (space)"
        )

    @work(exclusive=True, group="compare-show", exit_on_error=False)
    async def show_comparison(self, run_ids: list[str]) -> None:
        store = self.top.services.store
        if not run_ids or store is None:
            self.post_message(ComparisonLoaded(None))
            return
        prices = self.top.config.prices
        try:
            comparison = await asyncio.to_thread(store.compare, run_ids)
            report = await asyncio.to_thread(report_of, store, comparison, prices)
        except Exception as exc:
            self.notify(f"cannot compare: {describe_error(exc)}", severity="error")
            return
        self.post_message(ComparisonLoaded(comparison, report))

    def on_comparison_loaded(self, message: ComparisonLoaded) -> None:
        comparison, report = message.comparison, message.report
        summary = None if comparison is None else comparison_table(comparison)
        levels = None if report is None else levels_table(report)
        _fill(self.query_one("#compare-table", DataTable), summary)
        _fill(self.query_one("#compare-levels", DataTable), levels)
        self._views = (comparison, summary, levels)
        self._show_title()
        self._draw_curves([] if comparison is None else comparison_curves(comparison))

    def _show_title(self) -> None:
        comparison, summary, levels = self._views
        title = self.query_one("#compare-title", Static)
        if comparison is None or summary is None:
            title.update("Comparison: pick two or more runs on the left (space)")
            return
        if self._shown == "#compare-regression" and self._regression is not None:
            table, lines = self._regression
            # plain text: run ids in brackets are no markup
            title.update(Text("\n".join([f"Regression check: {table.title}", *lines])))
            return
        shown = levels if self._shown == "#compare-levels" and levels is not None else summary
        simulated = any(r.simulated for r in comparison.runs)
        title.update(
            f"{len(summary.rows)} runs"
            + (f" ({summary.unfinished} without a finished level)" if summary.unfinished else "")
            + f": {shown.title}"
            + ("  [simulated engines]" if simulated else "")
            + "".join(f"\nwarning: {warning}" for warning in comparison.warnings)
        )

    def _draw_curves(self, curves: list[Curve]) -> None:
        for plot_id, title, ys, ylabel in CURVE_CHARTS:
            series = (series_of(c.label, c.concurrency, ys(c)) for c in curves)
            self.query_one(plot_id, Chart).show(
                ChartData(
                    title,
                    tuple(s for s in series if s is not None),
                    xlabel="concurrency",
                    ylabel=ylabel,
                    xlog=True,
                )
            )

    def _show_table(self, table_id: str) -> None:
        self._shown = table_id
        for other in ("#compare-table", "#compare-levels", "#compare-regression"):
            self.query_one(other).set_class(other != table_id, "hidden")
        self._show_title()

    def action_toggle_levels(self) -> None:
        """The summary (the seed's table) or every level of every run, in the same place."""
        levels = self._shown != "#compare-levels"
        self._show_table("#compare-levels" if levels else "#compare-table")

    def action_baseline(self) -> None:
        """Two runs picked: the newer judged against the older, level by level, as
        ``infer-top compare --baseline`` judges it; again: back to the summary."""
        if self._shown == "#compare-regression":
            self._show_table("#compare-table")
            return
        selected = set(self.query_one("#pick", SelectionList).selected)
        picked = [r for r in self._runs if r.run_id in selected]
        if len(picked) != 2:
            self.notify(
                f"pick exactly two runs for a regression check ({len(picked)} picked): "
                "the older is the baseline",
                severity="warning",
            )
            return
        base, new = sorted(picked, key=lambda r: r.created_at)
        self._check_regression(base.run_id, new.run_id)

    @work(exclusive=True, group="compare-regression", exit_on_error=False)
    async def _check_regression(self, base: str, new: str) -> None:
        store = self.top.services.store
        if store is None:
            return
        try:
            check = await asyncio.to_thread(
                check_regression, store, base, new, threshold=DEFAULT_THRESHOLD, any_config=True
            )
        except Exception as exc:
            self.notify(f"cannot check: {describe_error(exc)}", severity="error")
            return
        # a few lines above the table however many regressed: 80x24 keeps room for rows
        self.post_message(RegressionChecked(regression_table(check), findings(check, most=3)))

    def on_regression_checked(self, message: RegressionChecked) -> None:
        self._regression = (message.table, message.findings)
        _fill(self.query_one("#compare-regression", DataTable), message.table)
        self._show_table("#compare-regression")

    def action_export(self, fmt: str) -> None:
        self._export(list(self.query_one("#pick", SelectionList).selected), fmt)

    @work(group="compare-export", exit_on_error=False)
    async def _export(self, run_ids: list[str], fmt: str) -> None:
        prices = self.top.config.prices
        try:
            path = await asyncio.to_thread(
                export_comparison, self.top.services, run_ids, fmt, prices
            )
        except Exception as exc:
            self.notify(f"export failed: {describe_error(exc)}", severity="error")
            return
        self.notify(f"exported to {path}")


def _fill(table: DataTable[str], view: CompareTable | None) -> None:
    table.clear(columns=True)
    if view is None:
        return
    table.add_columns(*view.columns)
    for key, cells in view.rows:
        table.add_row(*cells, key=key)
