"""A real full disk under the TUI's store while its Load screen records a run (issue 22,
docs/reliability.md): the store lives on a small tmpfs this test mounts. The error is on
screen, on every screen, in words that say what to do (the store writer used to only log
it, and the Load screen hung on "running" when the run's last write failed); the TUI
keeps running; what was written before is intact; once space returns the held rows are
written and the error goes."""

from __future__ import annotations

import dataclasses
import os
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from textual.widgets import Select

from control.config import Config
from control.load_profiles import LoadProfile
from control.loads import run_load
from store import open_store
from tests import disks
from tests.loadgen.conftest import sched_server  # noqa: F401 (the fixture)
from tests.tui.conftest import QUIET, SIZE, engines_at_load, fleet_frames, frozen_services
from tests.tui.helpers import text_of, wait_until
from tui.app import create_app

FAST = ("--ttft-ms", "2", "--ttft-spread-ms", "0", "--itl-ms", "1")
FIRST = LoadProfile("smoke", (2,), 20, 16, 4)
"""A small run written while there is room."""
BIG = LoadProfile("sweep", (16,), 3000, 16, 4)
"""About 1.3 MB of store (as under `bench`): many times the room left for it."""
ROOM_BYTES = 96 * 1024
"""What the disk keeps free for the big run: a few commits go in, then it is full."""


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    with disks.small_disk(tmp_path / "disk", "4m") as path:
        yield path


def _fill_but(disk: Path, room_bytes: int) -> None:
    """Leave only ``room_bytes`` free on ``disk``: a ballast file takes the rest."""
    stat = os.statvfs(disk)
    free = stat.f_bavail * stat.f_frsize
    (disk / "ballast").write_bytes(b"\0" * max(0, free - room_bytes))


def _store_error(pilot: Any) -> str:
    line = pilot.app.screen.query_one("#store-error")
    return str(line.render()) if line.display else ""


async def _run(pilot: Any, profile: str) -> None:
    screen: Any = pilot.app.screen
    screen.query_one("#target", Select).value = "h200-0/vllm-a"
    screen.query_one("#profile", Select).value = profile
    screen.query_one("#load-from", Select).value = "here"  # no agent: the engine's own URL
    await pilot.pause()
    screen.action_run()


async def test_a_full_disk_during_a_tui_run_is_said_on_screen_and_the_tui_goes_on(
    sched_server: Callable[..., Any],  # noqa: F811
    small_disk: Path,
) -> None:
    server = sched_server(*FAST)
    db = small_disk / "runs.db"
    services = frozen_services(load_runner=run_load)
    store = services.store = open_store(db, on_error=services.report_store_error)  # as wiring
    config = Config(refresh_s=0.05, alerts=QUIET, load_profiles=(FIRST, BIG))
    engine = dataclasses.replace(engines_at_load()[0], url=server.url + "/")
    try:
        app = create_app(config, services=services)
        async with app.run_test(size=SIZE) as pilot:
            for frame in fleet_frames("h200-0", 2, range(5), (engine,)):
                app.ingest("h200-0", frame)
            await pilot.press("4")
            screen: Any = app.screen
            await wait_until(pilot, lambda: bool(screen.target_keys), "the engine as a target")

            await _run(pilot, "smoke")
            await wait_until(
                pilot,
                lambda: "finished and saved" in text_of(pilot, "#load-status"),
                "the first run to be saved",
                timeout_s=120,
            )
            assert _store_error(pilot) == ""

            _fill_but(small_disk, ROOM_BYTES)
            await _run(pilot, "sweep")
            await wait_until(
                pilot,
                lambda: "database or disk is full" in _store_error(pilot),
                "the full disk said on screen",
                timeout_s=120,
            )
            said = " ".join(_store_error(pilot).split())
            assert "store: could not write" in said and "infer-top runs prune" in said, said
            # the operator stops the run: the Load screen says the run is not all saved
            screen.stop_run("cancelled by the operator in the TUI")
            await wait_until(
                pilot,
                lambda: "only partly in the store" in text_of(pilot, "#load-status"),
                "the run's end on the Load screen",
                timeout_s=120,
            )
            status = " ".join(text_of(pilot, "#load-status").split())
            assert "database or disk is full" in status, status

            # the TUI goes on: another screen draws, the error still on it
            await pilot.press("1")
            await wait_until(
                pilot,
                lambda: (
                    app.current_mode == "fleet"
                    and "database or disk is full" in _store_error(pilot)
                ),
                "the Fleet screen, saying it too",
            )

            (small_disk / "ballast").unlink()  # space comes back
            await wait_until(
                pilot, lambda: _store_error(pilot) == "", "the error to go", timeout_s=60
            )
        store.flush()
        conn = sqlite3.connect(db)
        try:
            assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        finally:
            conn.close()
        first, big = sorted(store.list_runs(), key=lambda r: r.created_at)
        assert (first.status, first.request_count) == ("completed", 20)
        firsts = list(store.iter_requests(first.run_id))
        assert len(firsts) == 20 and all(r.ok and r.output_tokens == 4 for r in firsts)
        assert big.status == "interrupted" and 0 < big.request_count < 3000, big
        bigs = list(store.iter_requests(big.run_id))
        assert len(bigs) == big.request_count
        assert all(r.output_tokens == 4 for r in bigs if r.ok and not r.incomplete)
    finally:
        store.close()
