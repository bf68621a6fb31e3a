"""Load tests from the TUI are not three fixed profiles: the operator edits the levels
(concurrency or arrival rate), requests, lengths, warm-up, timeout and SLO, saves them
as a named profile in the config file, and runs it; the level table shows req/s, TPOT,
E2E and goodput beside tok/s and TTFT, and marks percentiles from too few requests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from textual.widgets import DataTable, Input, Select

from control.config import load_config
from control.load_view import LOAD_LEVEL_COLUMNS
from tests.tui.driving import live_app
from tests.tui.helpers import text_of, wait_until

NODE = "profile-node"
CONFIG = """\
[load.profiles.mine]
concurrency = [2]
requests = 4
"""


def level_rows(table: DataTable[Any]) -> list[dict[str, str]]:
    labels = [label for label, _ in LOAD_LEVEL_COLUMNS]
    return [dict(zip(labels, (str(c) for c in table.get_row(k)), strict=True)) for k in table.rows]


async def test_a_profile_edited_saved_and_run_from_the_load_screen(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text(CONFIG)
    config = load_config(path)
    async with live_app(tmp_path, NODE, "the agent's first frame", config=config) as live:
        app, pilot, store = live.app, live.pilot, live.services.store
        engine = await live.client.start("sim", {"profile": "h100-llama2-7b-vllm"}, runtime="sim")
        await pilot.press("4")
        key = f"{NODE}/{engine.id}"
        await wait_until(pilot, lambda: key in app.screen.target_keys, "the engine as a target")
        screen = app.screen
        profiles = screen.query_one("#profile", Select)
        offered = [str(v) for _, v in profiles._options if v is not Select.BLANK]
        assert offered == ["smoke", "sweep", "seed-h100", "mine"]  # the config's own too
        profiles.value = "mine"
        await pilot.pause()

        await pilot.press("e")
        await wait_until(pilot, lambda: app.screen.query("#pf-levels"), "the profile form")
        form = app.screen
        assert form.query_one("#pf-levels", Input).value == "2"
        for field, value in (
            ("#pf-name", "rated"),
            ("#pf-levels", "4, 8 req/s"),
            ("#pf-requests", "6"),
            ("#pf-input", "48"),
            ("#pf-output", "12"),
            ("#pf-warmup", "1"),
            ("#pf-timeout", "30"),
            ("#pf-slo", "ttft=10s"),
        ):
            form.query_one(field, Input).value = value
        await pilot.click("#pf-save")
        await wait_until(pilot, lambda: "[load.profiles.rated]" in path.read_text(), "the save")
        saved = {p.name: p for p in load_config(path).load_profiles}
        assert set(saved) == {"mine", "rated"}  # the edited copy is saved by its new name
        rated = saved["rated"]
        assert (rated.rates, rated.requests_per_level, rated.warmup_requests) == ((4.0, 8.0), 6, 1)
        assert (rated.input_len, rated.output_len, rated.timeout_s, rated.slo) == (
            48, 12, 30.0, "ttft=10s",
        )  # fmt: skip
        assert app.screen is screen and profiles.value == "rated"
        assert "rated: rate 4,8 req/s · 6 requests each" in text_of(pilot, "#load-status")

        screen.query_one("#target", Select).value = key
        await pilot.press("r")
        await wait_until(
            pilot,
            lambda: "finished and saved" in text_of(pilot, "#load-status"),
            "the run to finish",
            timeout_s=120,
        )
        rows = level_rows(screen.query_one("#load-levels", DataTable))
        assert [r["Level"] for r in rows] == ["4 req/s", "8 req/s"]
        for row in rows:
            assert row["OK"] == "6" and row["in flight"] == "done"
            for column in ("req/s", "tok/s", "TPOT p50", "E2E p50", "goodput"):
                assert row[column] not in ("-", "n/a", "no SLO"), (column, row)
            # six requests: a p50 is one, a p99 is not (marked), whatever the value
            assert not row["TTFT p50"].endswith("*") and row["TTFT p99"].endswith("*")
            assert row["E2E p99"].endswith("*") and not row["E2E p50"].endswith("*")
        (run,) = store.list_runs()
        levels = [lv.summary for lv in store.levels(run.run_id)]
        assert [(lv.request_rate, lv.completed) for lv in levels] == [(4.0, 6), (8.0, 6)]
        assert all(lv.goodput_req_s is not None for lv in levels)
        assert run.workload["input_len"] == 48 and run.profile["spec"]["warmup_requests"] == 1
