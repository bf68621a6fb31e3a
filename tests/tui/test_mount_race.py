"""A frame that arrives while a screen is still being built: the redraw it asks for must
wait for the screen's widgets, never query half-built ones (seen on a loaded machine as
``NoMatches: SelectOverlay`` from the Engines screen's node picker, which ended the TUI)."""

from __future__ import annotations

import asyncio

from textual.widgets import Select

from tests.tui.conftest import SIZE, engines_at_load, fleet_frames, frozen_app
from tests.tui.helpers import wait_until


async def test_a_redraw_while_a_screen_mounts_waits_for_its_widgets() -> None:
    app = frozen_app()
    async with app.run_test(size=SIZE) as pilot:
        for frame in fleet_frames("h200-0", 2, range(3), engines_at_load()):
            app.ingest("h200-0", frame)

        async def open_while_redrawing(mode: str, picker: str) -> Select[str]:
            switching = asyncio.ensure_future(app.switch_mode(mode))
            for _ in range(50):  # a redraw at every turn of the loop while it mounts
                app.redraw_now()
                await asyncio.sleep(0)
            await switching
            await wait_until(pilot, lambda: app.current_mode == mode, f"the {mode} screen")
            select: Select[str] = app.screen.query_one(picker, Select)
            await wait_until(pilot, lambda: isinstance(select.value, str), "a pick")
            return select

        assert (await open_while_redrawing("engines", "#node")).value == "h200-0"
        assert str((await open_while_redrawing("load", "#target")).value).startswith("h200-0/")
        assert app.is_running
