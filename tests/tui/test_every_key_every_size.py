"""80x24 is a supported size: every screen at 80x24, 100x30 and 160x48, resized between
them, takes every key the help lists (the app's, its own, its lists') without the app
ending, and every button of every form can be scrolled into view.  Before, the Engines
form's Start / Swap / Stop lay below an 80x24 screen with no way to scroll to them, and
PageUp in the Load screen's opened target list ended the app (a Textual defect)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot
from textual.widgets import Button

from tests.tui.conftest import engines_at_load, fleet_frames, frozen_app, frozen_services
from tests.tui.helpers import wait_until
from tui.screens.base import ALERTS_KEY, TABS
from tui.screens.help import HelpScreen

SIZES = ((80, 24), (100, 30), (160, 48))
SCREENS = (*((key, mode) for key, mode, _ in TABS), (ALERTS_KEY, "alerts"))
LEAVE = {"q", "ctrl+q", "ctrl+c", "super+c"}
"""Keys that end the app (or copy to a clipboard there is none of): pressed elsewhere."""


async def _back_to(pilot: Pilot[Any], key: str, mode: str) -> None:
    """Close whatever a key opened (a question, the help, the palette) and return to
    ``mode``, as an operator would with Esc and the screen's key."""
    app: Any = pilot.app
    for _ in range(3):  # bounded: a question over the help at most
        if app.screen.is_modal or app.screen.id == "--command-palette":
            await pilot.press("escape")
    if app.current_mode != mode:
        await pilot.press("escape")  # out of a text field a key may have entered
        await pilot.press(key)
        await wait_until(pilot, lambda: app.current_mode == mode, f"the {mode} screen back")


def _keys_of(app: Any) -> dict[str, list[str]]:
    """Per help section, the keys it lists (Textual's key names, as a press takes them)."""
    app.action_help()
    help_screen = next(s for s in app.screen_stack if isinstance(s, HelpScreen))
    keys = {
        title: [b.key for b in bindings if b.key not in LEAVE]
        for title, bindings in help_screen.sections
    }
    help_screen.dismiss(None)
    return keys


async def _in_reach(pilot: Pilot[Any], mode: str, size: tuple[int, int]) -> None:
    """Every button of the screen can be scrolled fully into view."""
    app: Any = pilot.app
    for button in app.screen.query(Button):
        button.scroll_visible(animate=False)
        await pilot.pause()
        shown = app.screen.region.intersection(button.region)
        assert shown == button.region, f"{mode} at {size}: {button.id} out of reach"


@pytest.mark.parametrize("size", SIZES, ids=[f"{w}x{h}" for w, h in SIZES])
async def test_every_screen_takes_every_key(size: tuple[int, int], tmp_path: Path) -> None:
    """At ``size`` every key on every screen (the app's own once: they do the same
    everywhere); then resized through the other sizes, every screen again."""
    app = frozen_app(frozen_services(exports_dir=tmp_path))  # exports land in tmp
    titles = {mode: title for _, mode, title in TABS} | {"alerts": "Alerts"}
    async with app.run_test(size=size) as pilot:
        for frame in fleet_frames("h200-0", 4, range(5), engines_at_load()):
            app.ingest("h200-0", frame)
        app.redraw_now()
        await pilot.pause()
        keys = _keys_of(app)
        await pilot.pause()
        for n, (key, mode) in enumerate(SCREENS):
            await _back_to(pilot, key, mode)
            everywhere = keys["Everywhere"] if n == 0 else []
            for pressed in (*keys[titles[mode]], *keys["Lists and tables"], *everywhere):
                await pilot.press(pressed)
                assert app.is_running, f"{pressed!r} on {mode} at {size} ended the app"
                await _back_to(pilot, key, mode)
            await _in_reach(pilot, mode, size)
        for other in (*SIZES[SIZES.index(size) + 1 :], *SIZES[: SIZES.index(size)]):
            await pilot.resize_terminal(*other)
            for key, mode in SCREENS:
                await _back_to(pilot, key, mode)
                await _in_reach(pilot, mode, other)
    assert app.return_code in (None, 0)
