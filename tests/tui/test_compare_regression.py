"""The Compare screen's regression check (issue 21, point 5, "and in the TUI"): with two
runs picked, ``b`` judges the newer against the older level by level, as ``infer-top
compare --baseline`` does (the same ``control.regression`` and the same rows); with any
other number picked it says what to do, and ``b`` again goes back to the summary."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from textual.widgets import DataTable, SelectionList

from control.regression import DEFAULT_THRESHOLD, check_regression
from control.regression_view import regression_table
from store import open_store
from tests.control.test_regression import _run
from tests.tui.conftest import SIZE, frozen_app, frozen_services
from tests.tui.helpers import text_of, wait_until


def row(table: DataTable[Any], key: str) -> list[str]:
    return [str(v) for v in table.get_row(key)]


async def test_b_judges_the_newer_of_two_picked_runs_against_the_older(tmp_path: Path) -> None:
    store = open_store(tmp_path / "runs.db")
    try:
        base = _run(store, "base", 1.0, seed=1)
        slow = _run(store, "slow", 2.0, seed=2)  # twice as slow at c=4, same at c=1
        store.flush()
        cli_rows = regression_table(
            check_regression(store, base, slow, threshold=DEFAULT_THRESHOLD)
        ).rows
        app = frozen_app(frozen_services(store=store))
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("5")
            pick: SelectionList[str] = app.screen.query_one("#pick", SelectionList)
            await wait_until(pilot, lambda: pick.option_count == 2, "both runs listed")
            regression = app.screen.query_one("#compare-regression", DataTable)
            pick.deselect_all()
            pick.select(slow)
            await pilot.pause()
            await pilot.press("b")  # one run picked: nothing to judge, and it says why
            await wait_until(
                pilot,
                lambda: any("pick exactly two runs" in n.message for n in app._notifications),
                "the advice",
            )
            assert not regression.display
            pick.select(base)
            await pilot.pause()
            await pilot.press("b")
            await wait_until(pilot, lambda: regression.display, "the regression table")
            await wait_until(pilot, lambda: regression.row_count == len(cli_rows), "its rows")
            title = text_of(pilot, "#compare-title")
            assert f"slow [{slow}] against base [{base}]" in " ".join(title.split())
            assert "regression at c=4: TTFT p50" in title
            # the same rows the CLI prints, the slower level flagged, the other not
            for key, cells in cli_rows:
                assert row(regression, key) == list(cells)
            assert row(regression, "c=4/TTFT p50")[-1] == "REGRESSION"
            assert all(row(regression, k)[-1] != "REGRESSION" for k, _ in cli_rows if "c=1" in k)
            await pilot.press("b")
            await wait_until(pilot, lambda: not regression.display, "back to the summary")
            assert app.screen.query_one("#compare-table", DataTable).display
    finally:
        store.close()
