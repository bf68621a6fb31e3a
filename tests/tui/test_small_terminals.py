"""Compare in the terminals operators have (80x24 over SSH) and across resizes; a chart
that cannot plot says why in its place while the rest of the app goes on."""

from __future__ import annotations

from typing import Any

import pytest
from textual.pilot import Pilot
from textual.widgets import DataTable
from textual_plotext.plot import Plot

from tests.tui.conftest import frozen_app, frozen_services
from tests.tui.helpers import painted, wait_until
from tui.app import InferTopApp

BRAILLE = {chr(c) for c in range(0x2801, 0x2900)}
"""The dots plotext draws curves with: a chart shows data when some are painted."""
SEED_RUNS = 5
CHARTS = ("#curve-tps", "#curve-ttft")


async def open_compare(pilot: Pilot[Any], app: InferTopApp) -> DataTable[Any]:
    await pilot.press("5")
    table = app.screen.query_one("#compare-table", DataTable)
    await wait_until(pilot, lambda: table.row_count == SEED_RUNS, "the seed comparison")
    return table


async def resize(pilot: Pilot[Any], size: tuple[int, int]) -> None:
    await pilot.resize_terminal(*size)
    await pilot.pause()
    await pilot.pause()  # the layout, then the widgets' renders at their new sizes


def words(text: str) -> str:
    return " ".join(text.split())


async def test_compare_renders_at_80x24_and_across_resizes(seed_store: Any) -> None:
    """The stored comparison at 80x24, then 160x48 → 80x24 → 100x30 → 120x40: every
    render plots both curves again and the table stays; the app never exits.  (plotext
    transformed the data it held in place, so a second render took the log of a log.)"""
    app = frozen_app(frozen_services(store=seed_store))
    async with app.run_test(size=(80, 24)) as pilot:
        table = await open_compare(pilot, app)
        for size in ((80, 24), (160, 48), (80, 24), (100, 30), (120, 40)):
            await resize(pilot, size)
            assert app.is_running and app.screen.size == size
            for chart_id in CHARTS:
                shown = painted(app.screen.query_one(chart_id))
                assert BRAILLE & set(shown), f"{chart_id} plots no curve at {size}:\n{shown}"
                assert "cannot be drawn" not in shown
            assert table.row_count == SEED_RUNS
            assert "trtllm simulated" in painted(table)
    assert app.return_code in (None, 0)


async def test_charts_too_small_to_plot_say_so(seed_store: Any) -> None:
    app = frozen_app(frozen_services(store=seed_store))
    async with app.run_test(size=(70, 24)) as pilot:  # 16 cells left for each curve
        table = await open_compare(pilot, app)
        await resize(pilot, (70, 24))
        for chart_id in CHARTS:
            assert "too small to plot" in words(painted(app.screen.query_one(chart_id)))
        assert "trtllm simulated" in painted(table)
        await resize(pilot, (120, 40))
        for chart_id in CHARTS:
            assert BRAILLE & set(painted(app.screen.query_one(chart_id)))


async def test_a_chart_that_fails_to_plot_says_why_and_the_app_goes_on(
    seed_store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every widget's drawing is guarded (``tui.guard``), the charts' too."""

    def broken_build(self: Plot) -> str:
        raise IndexError("list index out of range")

    app = frozen_app(frozen_services(store=seed_store))
    async with app.run_test(size=(120, 40)) as pilot:
        monkeypatch.setattr(Plot, "build", broken_build)
        table = await open_compare(pilot, app)
        await resize(pilot, (120, 40))
        for chart_id in CHARTS:
            shown = words(painted(app.screen.query_one(chart_id)))
            assert f"{chart_id} cannot be drawn: IndexError: list index out of range" in shown
        assert "trtllm simulated" in painted(table)

        await pilot.press("6")  # the app still answers keys
        await wait_until(pilot, lambda: app.current_mode == "history", "the History screen")
        monkeypatch.undo()
        await pilot.press("5")
        await resize(pilot, (100, 30))  # a later render plots again: nothing stuck
        for chart_id in CHARTS:
            assert BRAILLE & set(painted(app.screen.query_one(chart_id)))
    assert app.return_code in (None, 0)
