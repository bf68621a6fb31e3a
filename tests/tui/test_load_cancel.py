"""Cancel and clean exit of a load test from the TUI: `c` asks, then stops the run and
keeps its finished levels and their requests (stored as interrupted, saying why); `q`
during a run asks first.  Before, a running load test could not be stopped from the
TUI at all, and `q` quit at once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from textual.widgets import DataTable

from control.load_view import finished_levels
from tests.tui.driving import live_app
from tests.tui.helpers import text_of, wait_until

NODE = "cancel-node"
SIM = {"profile": "orin-llama3.2-3b-llamacpp", "time_scale": 0.1}
"""Two slots: the sweep's later levels take as long as its second (about 9 s each here,
the first 14 s), so they are still running when the cancel lands, however long the
screen takes to ask and to be answered on a busy machine (a pilot's key press waits for
the screen to settle: seconds under a run's progress)."""


async def _start_sweep(live: Any) -> Any:
    engine = await live.client.start("sim", SIM, [0], runtime="sim")
    assert engine.health == "healthy", engine
    pilot, app = live.pilot, live.app
    await pilot.press("4")
    key = f"{NODE}/{engine.id}"
    await wait_until(pilot, lambda: key in app.screen.target_keys, "the engine as a target")
    screen = app.screen
    screen.query_one("#target").value = key
    screen.query_one("#profile").value = "sweep"  # 5 levels of 32 requests
    await pilot.click("#run")
    levels = screen.query_one("#load-levels", DataTable)

    def finished() -> int:
        return finished_levels(levels.get_row(k) for k in levels.rows)

    await wait_until(pilot, lambda: finished() >= 1, "the first level", timeout_s=120)
    return screen


async def test_cancel_mid_run_keeps_the_finished_levels(tmp_path: Path) -> None:
    async with live_app(tmp_path, NODE, "the agent's first frame", replay_gpus=1) as live:
        pilot, store = live.pilot, live.services.store
        screen = await _start_sweep(live)
        await pilot.press("c")
        await wait_until(pilot, lambda: pilot.app.screen.query("#yes"), "the confirmation")
        assert "Cancel the load test on cancel-node/" in str(
            pilot.app.screen.query_one("Label").render()
        )
        await pilot.click("#yes")
        await wait_until(
            pilot,
            lambda: "saved as interrupted" in text_of(pilot, "#load-status"),
            "the cancelled run to be saved",
            timeout_s=60,
        )
        assert pilot.app.screen is screen
        (run,) = store.list_runs()
        assert (run.status, run.status_reason) == (
            "interrupted",
            "cancelled by the operator in the TUI",
        )
        levels = [lv.summary for lv in store.levels(run.run_id)]
        assert 1 <= len(levels) < 5, levels
        assert levels[0].completed == 32  # the finished level, whole
        first = [r for r in store.iter_requests(run.run_id) if r.level_index == 0]
        assert len(first) == 32 and all(r.ok for r in first)
        assert f"its {len(levels)} finished level(s)" in text_of(pilot, "#load-status")


async def test_quit_during_a_run_asks_first_and_keep_running_keeps_it(tmp_path: Path) -> None:
    async with live_app(tmp_path, NODE, "the agent's first frame", replay_gpus=1) as live:
        pilot = live.pilot
        screen = await _start_sweep(live)
        await pilot.press("q")
        await wait_until(pilot, lambda: pilot.app.screen.query("#yes"), "the quit question")
        assert pilot.app.is_running
        await pilot.press("escape")  # keep running
        await wait_until(pilot, lambda: pilot.app.screen is screen, "the Load screen back")
        assert screen.running_target is not None and pilot.app.is_running
        # Quitting for real stops the run; it is kept as interrupted with its levels.
        await pilot.press("q")
        await wait_until(pilot, lambda: pilot.app.screen.query("#yes"), "the quit question")
        await pilot.click("#yes")
        await wait_until(pilot, lambda: not pilot.app.is_running, "the app to exit")
        store = live.services.store
        store.flush()
        (run,) = store.list_runs()
        assert run.status == "interrupted", run
        assert run.status_reason == "stopped: the TUI was quit during the run"
        assert store.levels(run.run_id)
