"""No widget that fails to draw ends the app (``tui.guard``): it says why in its own place
and the rest goes on.  Before, only the charts caught their own failures: a table row
that could not be drawn (a value its cells function cannot format) raised out of the
compositor and Textual ended the app with a traceback."""

from __future__ import annotations

import dataclasses
from typing import Any, cast

from textual.geometry import Region

from tests.tui.conftest import fleet_frames, frozen_app
from tests.tui.helpers import wait_until
from tui.fasttable import FastTable


def _on_screen(widget: Any) -> str:
    """What the compositor draws of ``widget`` (the path every widget is drawn by)."""
    strips = widget.render_lines(Region(0, 0, widget.size.width, widget.size.height))
    return "\n".join(strip.text for strip in strips)


async def test_a_table_row_that_cannot_be_drawn_says_why_and_the_app_goes_on() -> None:
    app = frozen_app()
    async with app.run_test(size=(120, 40)) as pilot:
        first, second = fleet_frames("h200-0", 2, range(2))
        # a GPU without a name (an agent that sent null): its row's cells cannot be made
        nameless = dataclasses.replace(second.gpus[1], name=cast(str, None))
        app.ingest("h200-0", first)
        app.redraw_now()
        table = app.screen.query_one("#gpus", FastTable)
        await wait_until(pilot, lambda: len(table.keys) == 2, "the GPU rows")
        app.ingest("h200-0", dataclasses.replace(second, gpus=(second.gpus[0], nameless)))
        app.redraw_now()
        await pilot.pause()
        await pilot.pause()  # drawn by the compositor: before, the app ended here
        assert app.is_running
        assert "#gpus cannot be drawn: AttributeError" in _on_screen(table)
        await pilot.press("2")  # the app still answers keys
        await wait_until(pilot, lambda: app.current_mode == "node", "the Node screen")
        await pilot.press("1")
        await wait_until(pilot, lambda: app.current_mode == "fleet", "the Fleet screen")
        app.ingest("h200-0", fleet_frames("h200-0", 2, range(2, 3))[0])
        app.redraw_now()  # good rows again: drawn again, nothing stuck
        await pilot.pause()
        await pilot.pause()
        assert "cannot be drawn" not in _on_screen(table)
        assert "H200" in _on_screen(table)
    assert app.return_code in (None, 0)
