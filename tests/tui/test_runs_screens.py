"""Compare and History as an operator uses them: pick, export, filter, open, delete."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from textual.widgets import DataTable, SelectionList

from tests.tui.conftest import SIZE, engines_at_load, fleet_frames, frozen_app, frozen_services
from tests.tui.helpers import text_of, wait_until


def only_export(folder: Path) -> str:
    (exported,) = folder.glob("compare-*.md")
    return exported.read_text()


async def test_compare_pick_and_export(seed_store: Any, tmp_path: Path) -> None:
    app = frozen_app(frozen_services(store=seed_store, exports_dir=tmp_path))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("5")
        table = app.screen.query_one("#compare-table", DataTable)
        await wait_until(pilot, lambda: table.row_count == 5, "the five seed runs")
        pick = app.screen.query_one("#pick", SelectionList)
        pick.focus()
        await pilot.press("space")  # un-pick the first run
        await wait_until(pilot, lambda: table.row_count == 4, "the comparison of four runs")
        await pilot.press("m")
        await wait_until(pilot, lambda: any(tmp_path.glob("compare-*.md")), "the export")
        text = only_export(tmp_path)
        assert "| tok/s |" in text and "simulated" in text
        assert len(pick.selected) == 4


async def test_history_filter_open_export_delete(seed_store: Any, tmp_path: Path) -> None:
    app = frozen_app(frozen_services(store=seed_store, exports_dir=tmp_path))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("6")
        runs = app.screen.query_one("#runs", DataTable)
        await wait_until(pilot, lambda: runs.row_count == 5, "the stored runs")
        await pilot.press("slash", *"vllm", "enter")
        await wait_until(pilot, lambda: runs.row_count == 1, "the filtered list")
        await pilot.press("enter")
        levels = app.screen.query_one("#levels", DataTable)
        await wait_until(pilot, lambda: levels.row_count == 7, "the opened run's levels")
        assert "seed02-h100-llama2-7b-vllm" in text_of(pilot, "#levels-title")
        await pilot.press("e")
        await wait_until(pilot, lambda: any(tmp_path.glob("compare-*.md")), "the export")

        await pilot.press("d")
        await wait_until(pilot, lambda: app.screen.query("#yes"), "the confirmation")
        await pilot.click("#yes")
        await wait_until(pilot, lambda: len(seed_store.list_runs()) == 4, "the deletion")
        assert "seed02-h100-llama2-7b-vllm" not in [r.run_id for r in seed_store.list_runs()]
        await wait_until(pilot, lambda: runs.row_count == 0, "the filtered list to empty")


async def test_enter_on_a_node_opens_its_charts() -> None:
    app = frozen_app()
    async with app.run_test(size=SIZE) as pilot:
        for name in ("h200-0", "h200-1"):
            for frame in fleet_frames(name, 2, range(30), engines_at_load()):
                app.ingest(name, frame)
        app.redraw_now()
        await pilot.pause()
        await pilot.press("down", "enter")
        await wait_until(pilot, lambda: app.current_mode == "node", "the Node screen")
        await wait_until(
            pilot, lambda: "Node h200-1" in text_of(pilot, "#node-title"), "the node's title"
        )
        await pilot.press("left_square_bracket")
        assert "Node h200-0" in text_of(pilot, "#node-title")


async def test_command_palette_goes_to_a_screen() -> None:
    app = frozen_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("colon")
        await wait_until(
            pilot, lambda: type(app.screen).__name__ == "CommandPalette", "the command palette"
        )
        await pilot.press(*"history", "enter")
        await wait_until(pilot, lambda: app.current_mode == "history", "the History screen")


async def test_a_burst_of_frames_is_one_redraw_of_the_newest() -> None:
    """Frames that arrive faster than the screen redraws are folded, not queued."""
    from tui.fasttable import FastTable

    app = frozen_app()
    batches: list[int] = []
    async with app.run_test(size=SIZE) as pilot:
        app.redraw_listeners.append(lambda arrivals, _at: batches.append(len(arrivals)))
        frames = fleet_frames("h200-0", 2, range(300))
        for frame in frames:  # no yield to the loop in between: a terminal that fell behind
            app.ingest("h200-0", frame)
        await wait_until(pilot, lambda: sum(batches) == 300, "the redraw")
        assert batches == [300]
        gpus = app.screen.query_one("#gpus", FastTable)
        newest = frames[-1].gpus[1]
        assert gpus.cells("h200-0/1")[3] == f"{newest.util_pct:,.0f}%"
