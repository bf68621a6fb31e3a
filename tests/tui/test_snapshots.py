"""One snapshot per screen in its main states, 120x40 (Compare also at 80x24, an
operator's SSH terminal), from fixed frames only.

Frames come from the real H200 recording at fixed positions (``tests/tui/replay_frames.py``),
the clock is frozen and the store holds the simulated seed comparison with
fixed ids, so a snapshot changes only when what the operator sees changes.
"""

from __future__ import annotations

from typing import Any

import pytest
from textual.pilot import Pilot
from textual.widgets import DataTable, SelectionList

from agents.protocol import ServiceInfo
from tests.tui.conftest import (
    NODE_PROCESSES,
    SIZE,
    VLLM_WORKERS,
    engines_at_load,
    fleet_frames,
    frozen_app,
    frozen_services,
)
from tests.tui.helpers import wait_until
from tui.app import InferTopApp
from tui.scale_form import ScaleEngine


def feed(
    app: InferTopApp, *, nodes: int = 2, gpus: int = 4, seconds: int = 90, workers: bool = False
) -> None:
    """``workers``: the GPUs list vllm-a's worker processes (the node screen's table)."""
    attributed = {"processes": NODE_PROCESSES, "owners": VLLM_WORKERS} if workers else {}
    for n in range(nodes):
        name = f"h200-{n}"
        for frame in fleet_frames(name, gpus, range(seconds), engines_at_load(), **attributed):
            app.ingest(name, frame)


async def settle(pilot: Pilot[Any], app: InferTopApp) -> None:
    await pilot.pause()
    app.redraw_now()
    await pilot.pause()


async def open_screen(pilot: Pilot[Any], app: InferTopApp, key: str, **feed_kwargs: Any) -> None:
    """Feed fixed frames, then open the screen on ``key`` as the operator would."""
    feed(app, **feed_kwargs)
    await settle(pilot, app)
    await pilot.press(key)
    await settle(pilot, app)


async def wait_rows(pilot: Pilot[Any], table: DataTable[Any], rows: int) -> None:
    # the store is read in a worker thread
    await wait_until(
        pilot, lambda: table.row_count >= rows, f"table {table.id} to show {rows} rows"
    )


def test_fleet(snap_compare: Any) -> None:
    app = frozen_app()

    async def before(pilot: Pilot[Any]) -> None:
        feed(app)
        await settle(pilot, app)

    assert snap_compare(app, terminal_size=SIZE, run_before=before)


def test_fleet_node_in_error(snap_compare: Any) -> None:
    app = frozen_app()

    async def before(pilot: Pilot[Any]) -> None:
        feed(app, nodes=1)
        app.model.mark_error("h200-9", "agent answered 401: missing or wrong bearer token", 8.0)
        await settle(pilot, app)

    assert snap_compare(app, terminal_size=SIZE, run_before=before)


def test_fleet_filtered(snap_compare: Any) -> None:
    app = frozen_app()

    async def before(pilot: Pilot[Any]) -> None:
        feed(app, nodes=3)
        await settle(pilot, app)
        await pilot.press("slash", "h", "2", "0", "0", "-", "1", "enter")
        await settle(pilot, app)

    assert snap_compare(app, terminal_size=SIZE, run_before=before)


def test_node_charts(snap_compare: Any) -> None:
    app = frozen_app()

    async def before(pilot: Pilot[Any]) -> None:
        await open_screen(pilot, app, "2", nodes=1, seconds=300, workers=True)

    assert snap_compare(app, terminal_size=SIZE, run_before=before)


def test_engines_with_fit(snap_compare: Any) -> None:
    app = frozen_app()

    async def before(pilot: Pilot[Any]) -> None:
        await open_screen(pilot, app, "3", nodes=1)
        screen = app.screen
        screen.query_one("#kind").value = "vllm"
        screen.query_one("#model").value = "Llama-3.1-70B"
        gpus = screen.query_one("#gpus", SelectionList)
        gpus.select(0)
        gpus.select(1)
        await settle(pilot, app)

    assert snap_compare(app, terminal_size=SIZE, run_before=before)


def test_load_idle(snap_compare: Any) -> None:
    app = frozen_app()

    async def before(pilot: Pilot[Any]) -> None:
        await open_screen(pilot, app, "4", nodes=1)
        app.screen.query_one("#target").value = "h200-0/vllm-a"
        await settle(pilot, app)

    assert snap_compare(app, terminal_size=SIZE, run_before=before)


async def open_compare(pilot: Pilot[Any], app: InferTopApp) -> None:
    await pilot.press("5")
    await wait_rows(pilot, app.screen.query_one("#compare-table", DataTable), 5)
    await settle(pilot, app)


def test_compare_seed_table(snap_compare: Any, seed_store: Any) -> None:
    app = frozen_app(frozen_services(store=seed_store))
    assert snap_compare(app, terminal_size=SIZE, run_before=lambda p: open_compare(p, app))


def test_compare_levels(snap_compare: Any, seed_store: Any) -> None:
    """``l``: every level of every run (latency, failures, GPU, energy, cost) beside the
    curves; the seed runs have no GPU telemetry, so those columns say n/a."""
    app = frozen_app(frozen_services(store=seed_store))

    async def before(pilot: Pilot[Any]) -> None:
        await open_compare(pilot, app)
        await pilot.press("l")
        await wait_rows(pilot, app.screen.query_one("#compare-levels", DataTable), 35)
        await settle(pilot, app)

    assert snap_compare(app, terminal_size=SIZE, run_before=before)


def test_compare_at_80x24(snap_compare: Any, seed_store: Any) -> None:
    """An operator's SSH terminal: the table scrolls sideways, both curves still plot."""
    app = frozen_app(frozen_services(store=seed_store))
    assert snap_compare(app, terminal_size=(80, 24), run_before=lambda p: open_compare(p, app))


def test_compare_at_80x24_after_resizes(snap_compare: Any, seed_store: Any) -> None:
    """Shrunk to 80x24 from larger terminals: the same screen as opened at 80x24."""
    app = frozen_app(frozen_services(store=seed_store))

    async def before(pilot: Pilot[Any]) -> None:
        await open_compare(pilot, app)
        for size in ((160, 48), (100, 30), (80, 24)):
            await pilot.resize_terminal(*size)
            await settle(pilot, app)

    assert snap_compare(app, terminal_size=(80, 24), run_before=before)


def test_history_opened_run(snap_compare: Any, seed_store: Any) -> None:
    app = frozen_app(frozen_services(store=seed_store))

    async def before(pilot: Pilot[Any]) -> None:
        await pilot.press("6")
        await wait_rows(pilot, app.screen.query_one("#runs", DataTable), 5)
        await pilot.press("enter")
        await wait_rows(pilot, app.screen.query_one("#levels", DataTable), 7)
        await settle(pilot, app)

    assert snap_compare(app, terminal_size=SIZE, run_before=before)


def test_help(snap_compare: Any) -> None:
    app = frozen_app()
    assert snap_compare(app, terminal_size=SIZE, press=["question_mark"])


@pytest.mark.parametrize("from_here", [False, True], ids=["from_the_node", "from_here"])
def test_load_finished(snap_compare: Any, seed_store: Any, from_here: bool) -> None:
    """A finished sweep as the Load test screen shows it, from fixed progress events
    (the simulated vLLM run's own level summaries), generated on the engine's node (the
    default) or here through its agent, as the choice and the path line say."""
    from runs.events import LevelFinished
    from tui.messages import LoadFinished, LoadProgress

    app = frozen_app(frozen_services(store=seed_store))
    levels = [lv.summary for lv in seed_store.levels("seed02-h100-llama2-7b-vllm")][:4]

    async def before(pilot: Pilot[Any]) -> None:
        await open_screen(pilot, app, "4", nodes=1)
        screen: Any = app.screen
        screen.query_one("#target").value = "h200-0/vllm-a"
        if from_here:
            screen.query_one("#load-from").value = "here"
        screen._planned = len(levels)
        events: list[Any] = [run_started(len(levels), from_here=from_here)]
        for s in levels:
            events += [*level_events(s, ticks=(1, 2, 3)), LevelFinished(s)]
        for event in events:
            screen.on_load_progress(LoadProgress(event))
        screen.on_load_finished(LoadFinished("fixed-run", None, "completed"))
        await settle(pilot, app)

    assert snap_compare(app, terminal_size=SIZE, run_before=before)


async def test_load_screen_preselects_the_first_healthy_engine_and_shows_its_gpus() -> None:
    app = frozen_app()
    async with app.run_test(size=SIZE) as pilot:
        await open_screen(pilot, app, "4", nodes=2)
        screen: Any = app.screen
        assert screen.query_one("#target").value == screen.target_keys[0]
        node = screen.target_keys[0].split("/", 1)[0]
        assert str(screen.query_one("#load-gpu-title").render()) == f"GPUs of {node}"
        assert screen.query_one("#load-gpus", DataTable).row_count == 4


def level_events(s: Any, ticks: tuple[int, ...], *, live_itl: bool = False) -> list[Any]:
    """A level from the fixed summary ``s``: started, then a progress event at each
    tick (in thirds of the level); ``live_itl`` adds the ITL percentiles so far."""
    from runs.events import LevelProgress, LevelStarted

    events: list[Any] = [LevelStarted(s.level_index, s.concurrency, None, s.completed, None)]
    for step in ticks:
        events.append(
            LevelProgress(
                s.level_index,
                s.completed * step // 3,
                s.failed,
                0,
                s.concurrency or 0,
                s.output_tok_s * step / 3,
                s.ttft_s.p50,
                s.ttft_s.p99,
                {},
                3.0 * step,
                itl_p50_s=s.itl_s.p50 if live_itl else None,
                itl_p99_s=s.itl_s.p99 if live_itl else None,
            )
        )
    return events


def run_started(levels: int, *, from_here: bool = False) -> Any:
    """The fixed run's start: generated on the engine's node (the screen's default), or
    here through its agent's proxy; it has no warnings."""
    from runs.events import RunStarted
    from runs.setup import CONTROL_PLANE, RunSetup

    setup = RunSetup(
        "tui", "vllm", "m", None, True, spec={}, workload={}, node="h200-0",
        load_node=CONTROL_PLANE if from_here else "h200-0",
        path="proxied" if from_here else "node-local",
    )  # fmt: skip
    return RunStarted("fixed-run", levels, (), setup, 0.0)


def running_level_events(summary: Any) -> list[Any]:
    """A level that has started and is part-way: two progress ticks, no LevelFinished."""
    return [run_started(1), *level_events(summary, ticks=(1, 2), live_itl=True)]


def test_load_running(snap_compare: Any, seed_store: Any) -> None:
    """A level part-way: its live row already shows ITL percentiles so far."""
    from control.load_view import LOAD_LEVEL_COLUMNS
    from tui.messages import LoadProgress

    app = frozen_app(frozen_services(store=seed_store))
    level = seed_store.levels("seed02-h100-llama2-7b-vllm")[3].summary

    async def before(pilot: Pilot[Any]) -> None:
        await open_screen(pilot, app, "4", nodes=1)
        screen: Any = app.screen
        screen._planned = 4
        for event in running_level_events(level):
            screen.on_load_progress(LoadProgress(event))
        await settle(pilot, app)
        cells = [str(cell) for cell in screen.query_one("#load-levels", DataTable).get_row_at(0)]
        shown = dict(zip([label for label, _ in LOAD_LEVEL_COLUMNS], cells, strict=True))
        level_, ok, in_flight, itl50, itl99 = (
            shown[c] for c in ("Level", "OK", "in flight", "ITL p50", "ITL p99")
        )
        assert (level_, ok, in_flight) == ("c=8", str(level.completed * 2 // 3), "8")
        assert itl50 == f"{level.itl_s.p50 * 1000:.1f}" and itl99 == f"{level.itl_s.p99 * 1000:.1f}"

    assert snap_compare(app, terminal_size=SIZE, run_before=before)


def test_an_estimated_full_kv_cache_fits_its_engine_column() -> None:
    """A full, estimated KV cache (``100%~``) shows whole in the 13-wide column, not ``0…``."""
    import dataclasses

    from control.model import NodeState
    from tui.widgets import ENGINE_COLUMNS, engine_cells

    engine = dataclasses.replace(
        engines_at_load()[0], kv_cache_usage=1.0, kv_cache_usage_is_estimate=True
    )
    labels = [label for label, _ in ENGINE_COLUMNS]
    kv = engine_cells((NodeState("n"), engine))[labels.index("KV cache")]
    width = dict(ENGINE_COLUMNS)["KV cache"]
    assert kv.endswith(" 100%~") and len(kv) <= width


def _alerting_app() -> InferTopApp:
    from alerts import parse_alert_config

    config = parse_alert_config({"rules": {"power_throttled": {"hold_s": 3}}})
    return frozen_app(alerts=config)


def test_fleet_with_alerts(snap_compare: Any) -> None:
    """The badge in the header and the marked node and GPU rows: the replayed H200s
    at their 700 W cap (glyph and word, not colour only)."""
    app = _alerting_app()

    async def before(pilot: Pilot[Any]) -> None:
        feed(app, nodes=2, gpus=2, seconds=20)
        await settle(pilot, app)

    assert snap_compare(app, terminal_size=SIZE, run_before=before)


def test_alerts_screen(snap_compare: Any) -> None:
    """Active alerts (one acknowledged) and a past one, with times, targets and values."""
    app = _alerting_app()

    async def before(pilot: Pilot[Any]) -> None:
        feed(app, nodes=1, gpus=2, seconds=40)  # raised at 16 s, cleared at 32 s
        feed(app, nodes=2, gpus=2, seconds=20)
        await settle(pilot, app)
        await pilot.press("exclamation_mark")
        await settle(pilot, app)
        await pilot.press("a")
        await wait_until(
            pilot, lambda: app.screen.query_one("#past", DataTable).row_count >= 2, "past rows"
        )
        await settle(pilot, app)

    assert snap_compare(app, terminal_size=SIZE, run_before=before)


def _running_load(app: InferTopApp) -> None:
    """The Load screen as it is while a load test runs against vllm-a."""
    screen: Any = app.screen
    screen._load_running, screen.running_target = True, "h200-0/vllm-a"


@pytest.mark.parametrize("key", ["c", "q"])
def test_load_running_asks_before_cancel_or_quit(snap_compare: Any, key: str) -> None:
    """`c` (cancel the run) and `q` (quit) during a load test ask first, naming it."""
    app = frozen_app()

    async def before(pilot: Pilot[Any]) -> None:
        await open_screen(pilot, app, "4", nodes=1)
        app.screen.query_one("#target").value = "h200-0/vllm-a"
        _running_load(app)
        await pilot.press(key)
        await wait_until(pilot, lambda: bool(app.screen.query("#yes")), "the question")
        await settle(pilot, app)

    assert snap_compare(app, terminal_size=SIZE, run_before=before)


def test_load_failed_with_the_engines_words(snap_compare: Any, seed_store: Any) -> None:
    """Every request refused: each level shows its failure kinds with the engine's own
    message, and the status line says why the run failed."""
    import dataclasses

    from runs.events import LevelFinished
    from tui.messages import LoadFinished, LoadProgress

    app = frozen_app(frozen_services(store=seed_store))
    levels = [lv.summary for lv in seed_store.levels("seed02-h100-llama2-7b-vllm")][:2]
    said = (
        "HTTP 400 exceed_context_size_error: request (391 tokens) exceeds the available "
        "context size (256 tokens), try increasing it"
    )

    async def before(pilot: Pilot[Any]) -> None:
        await open_screen(pilot, app, "4", nodes=1)
        screen: Any = app.screen
        screen._planned = 2
        for level in levels:
            failed = dataclasses.replace(
                level, completed=0, failed=32, failures_by_kind={"http_status": 32},
                failure_samples={"http_status": said},
            )  # fmt: skip
            screen.on_load_progress(LoadProgress(LevelFinished(failed)))
        screen.on_load_finished(
            LoadFinished(
                "0123456789ab", f"all 64 requests failed: http_status 64 — {said}", "failed"
            )
        )
        await settle(pilot, app)

    assert snap_compare(app, terminal_size=SIZE, run_before=before)


@pytest.mark.parametrize("action", ["stop", "swap"])
def test_engines_ask_before_stop_or_swap(snap_compare: Any, action: str) -> None:
    """Stop and swap ask first, naming the engine (kind, id, node)."""
    app = frozen_app()

    async def before(pilot: Pilot[Any]) -> None:
        await open_screen(pilot, app, "3", nodes=1)
        screen = app.screen
        screen.query_one("#model").value = "Llama-3.1-70B"
        table = screen.query_one("#engine-table", DataTable)
        await wait_rows(pilot, table, 2)
        table.move_cursor(row=0)
        # the frozen fleet has no agent; the question is asked before one is used
        screen._client = lambda: object()
        getattr(screen, f"action_{action}")()
        await wait_until(pilot, lambda: bool(app.screen.query("#yes")), "the question")
        await settle(pilot, app)

    assert snap_compare(app, terminal_size=SIZE, run_before=before)


def test_engines_scale_asks_how_many_replicas(snap_compare: Any) -> None:
    """``r``: the Swarm services the nodes' agents deployed, the one picked in the table
    first, with the replicas asked for now and where they run."""
    app = frozen_app()
    service = ServiceInfo(
        id="3f9a1c2b7d", kind="vllm", runtime="swarm", state="deployed", replicas=2,
        running=2, nodes=("h200-0", "h200-1"), placement="node.labels.pool == h200",
        port=8000, config={"model": "meta-llama/Llama-3.1-70B-Instruct"},
    )  # fmt: skip

    async def before(pilot: Pilot[Any]) -> None:
        await open_screen(pilot, app, "3", nodes=1)
        app.push_screen(ScaleEngine([("h200-0", service)], service.id))
        await wait_until(pilot, lambda: bool(app.screen.query("#scale-yes")), "the dialog")
        await settle(pilot, app)

    assert snap_compare(app, terminal_size=SIZE, run_before=before)


def test_compare_regression(snap_compare: Any, seed_store: Any) -> None:
    """``b`` with two runs picked: the newer judged against the older, level by level (the
    seed's simulated runs are two engines: the difference is noted above the table)."""
    app = frozen_app(frozen_services(store=seed_store))
    runs = seed_store.list_runs()
    newer, older = runs[0].run_id, runs[1].run_id

    async def before(pilot: Pilot[Any]) -> None:
        await open_compare(pilot, app)
        pick = app.screen.query_one("#pick", SelectionList)
        pick.deselect_all()
        pick.select(newer)
        pick.select(older)
        await pilot.pause()
        await pilot.press("b")
        table = app.screen.query_one("#compare-regression", DataTable)
        await wait_until(pilot, lambda: table.display and table.row_count > 0, "the check")
        await settle(pilot, app)

    assert snap_compare(app, terminal_size=SIZE, run_before=before)
