"""Open-loop rates, duration stops with cut requests, warm-up, progress events,
and the worker process the TUI uses."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from contextlib import aclosing
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest

from loadgen import (
    Arrival,
    ClosedLoop,
    LevelFinished,
    LevelProgress,
    LevelStarted,
    LoadSpec,
    MemorySink,
    OpenLoop,
    ProgressEvent,
    RunFailed,
    RunFinished,
    RunStarted,
    Target,
    Workload,
    describe_run,
    read_jsonl,
    run_load,
    run_load_in_subprocess,
)
from loadgen.stats import quantile
from runs.records import RequestRecord
from tests.waiting import apoll_until

FAST = ("--ttft-ms", "5", "--ttft-spread-ms", "5", "--itl-ms", "2")


async def test_open_loop_sends_on_schedule_at_the_offered_rate(
    sched_server: Callable[..., Any],
) -> None:
    """The plan is exact; what was sent can only trail it on a busy machine.  The
    achieved-rate bounds separate mistakes from that noise: a runner that does not
    pace sends all 40 within milliseconds (thousands per second), while leaving
    10-160/s would take the loop stalling for seconds of a 1 s plan."""
    server = sched_server(*FAST)
    sink = MemorySink()
    level = OpenLoop(40.0, Arrival.CONSTANT)
    spec = LoadSpec((level,), requests_per_level=40)
    result = await run_load(
        spec, Workload(input_len=8, output_len=4), Target(server.url, "m"), sink
    )
    s = result.levels[0]
    assert s.request_rate == 40.0 and s.completed == 40
    scheduled = sorted(r.scheduled_at for r in sink.records)
    gaps = [b - a for a, b in pairwise(scheduled)]
    assert all(abs(g - 0.025) < 1e-6 for g in gaps)  # the plan itself is exact
    assert 10.0 < s.achieved_rate < 160.0
    assert all(r.sent_at >= r.scheduled_at for r in sink.records)
    assert s.ttft_from_schedule_s.p50 is not None and s.ttft_s.p50 is not None
    assert s.ttft_from_schedule_s.p50 >= s.ttft_s.p50


async def test_duration_stop_cuts_in_flight_requests_as_incomplete_not_failed(
    sched_server: Callable[..., Any],
) -> None:
    # Answers take ~2 s; the level stops sending after 0.3 s and drains for 0.2 s.
    server = sched_server("--ttft-ms", "50", "--ttft-spread-ms", "0", "--itl-ms", "500")
    sink = MemorySink()
    spec = LoadSpec((ClosedLoop(3),), duration_s=0.3, drain_s=0.2)
    result = await run_load(
        spec, Workload(input_len=8, output_len=4), Target(server.url, "m"), sink
    )
    s = result.levels[0]
    assert (s.completed, s.failed, s.incomplete) == (0, 0, 3)
    assert len(sink.records) == 3
    cut = sink.records[0]
    assert cut.incomplete and cut.error_kind is None and cut.counted_output_tokens >= 1
    assert cut.error_message == "cut at the level's end"


async def test_warmup_requests_are_recorded_but_left_out_and_events_flow(
    sched_server: Callable[..., Any],
) -> None:
    server = sched_server(*FAST)
    sink = MemorySink()
    events: list[ProgressEvent] = []
    spec = LoadSpec((ClosedLoop(1), ClosedLoop(2)), requests_per_level=6, warmup_requests=2)
    result = await run_load(
        spec, Workload(input_len=8, output_len=4), Target(server.url, "m"), sink, events.append
    )
    assert len(sink.records) == 16
    assert sum(r.warmup for r in sink.records) == 4
    assert [s.completed for s in result.levels] == [6, 6] == [s.completed for s in sink.levels]
    kinds = [type(e) for e in events]
    assert kinds[0] is RunStarted and kinds[-1] is RunFinished
    assert kinds.count(LevelStarted) == 2 and kinds.count(LevelFinished) == 2
    last_progress = [e for e in events if isinstance(e, LevelProgress)][-1]
    assert last_progress.completed == 6 and last_progress.in_flight == 0
    assert last_progress.ttft_p50_s is not None and last_progress.output_tok_s > 0
    started = next(e for e in events if isinstance(e, RunStarted))
    assert started.warnings  # generic OpenAI engine: length cannot be forced


async def test_min_requests_per_client_sends_more_at_high_concurrency(
    sched_server: Callable[..., Any],
) -> None:
    server = sched_server(*FAST)
    sink = MemorySink()
    events: list[Any] = []
    spec = LoadSpec((ClosedLoop(1), ClosedLoop(4)), requests_per_level=3, min_requests_per_client=2)
    result = await run_load(
        spec, Workload(input_len=8, output_len=4), Target(server.url, "m"), sink, events.append
    )
    assert [s.completed for s in result.levels] == [3, 8]  # max(3, 2 x 1), max(3, 2 x 4)
    planned = [e.planned_requests for e in events if isinstance(e, LevelStarted)]
    assert planned == [3, 8]
    assert [r for r in events if isinstance(r, RequestRecord)] == sink.records


async def test_exact_length_fields_and_api_key_reach_the_server(
    sched_server: Callable[..., Any],
) -> None:
    server = sched_server(*FAST)
    sink = MemorySink()
    events: list[ProgressEvent] = []
    spec = LoadSpec((ClosedLoop(1),), requests_per_level=2)
    target = Target(server.url, "m", engine_kind="vllm", api_key="s3cret")
    await run_load(spec, Workload(input_len=8, output_len=5), target, sink, events.append)
    truth = server.truth()["requests"]
    assert {e["auth"] for e in truth.values()} == {"Bearer s3cret"}
    assert all(r.output_tokens == 5 for r in sink.records)
    assert "s3cret" not in repr(target)
    started = next(e for e in events if isinstance(e, RunStarted))
    # vLLM can force the length (this stand-in cannot tokenize: that is the one warning)
    assert [w for w in started.warnings if "output length" in w] == []
    assert len(started.warnings) == 1 and "not sized" in started.warnings[0]


async def test_worker_process_streams_events_and_writes_the_sink(
    sched_server: Callable[..., Any], tmp_path: Path
) -> None:
    server = sched_server(*FAST)
    path = tmp_path / "w.jsonl"
    spec = LoadSpec((ClosedLoop(2),), requests_per_level=8)
    events = [
        e
        async for e in run_load_in_subprocess(
            spec,
            Workload(input_len=8, output_len=4),
            Target(server.url, "m"),
            jsonl_path=str(path),
            run_id="sub",
        )
    ]
    assert isinstance(events[-1], RunFinished), events[-1]
    assert events[-1].result.levels[0].completed == 8
    records, levels = read_jsonl(path)
    assert len(records) == 8 and {r.run_id for r in records} == {"sub"}
    assert levels == list(events[-1].result.levels)


async def test_worker_process_reports_a_bad_dataset(tmp_path: Path) -> None:
    spec = LoadSpec((ClosedLoop(1),), requests_per_level=1)
    workload = Workload(dataset=str(tmp_path / "missing.json"))
    events = [
        e async for e in run_load_in_subprocess(spec, workload, Target("http://127.0.0.1:9", "m"))
    ]
    assert isinstance(events[-1], RunFailed)
    assert "missing.json" in events[-1].message


async def test_a_stopped_worker_keeps_its_requests_in_flight_as_cut(
    sched_server: Callable[..., Any], tmp_path: Path
) -> None:
    """Closing the iterator SIGTERMs the worker: it stops like Ctrl-C, recording the
    requests in flight as cut; they reach the parent's recorder, which marks the run
    interrupted (the worker never opens the store)."""
    from store import RunRecorder, open_store

    server = sched_server(*FAST)
    path, db = tmp_path / "crash.jsonl", tmp_path / "tui.db"
    spec = LoadSpec((ClosedLoop(4),), requests_per_level=100_000)
    seen = 0
    with open_store(db) as st:
        recorder = RunRecorder(st)
        worker = run_load_in_subprocess(
            spec, Workload(input_len=8, output_len=4), Target(server.url, "m"),
            record=recorder, jsonl_path=str(path), run_id="stopped",
        )  # fmt: skip
        async with aclosing(worker) as events:  # closing SIGTERMs the worker mid-run
            async for event in events:
                if isinstance(event, LevelProgress) and event.completed >= 20:
                    seen = event.completed
                    break
        assert (recorder.status, recorder.reason) == ("interrupted", "stopped by SIGTERM")
    records, levels = read_jsonl(path)
    assert seen >= 20 and levels == []
    assert len(records) >= seen  # everything reported finished is on disk
    assert all(r.ok for r in records) and any(r.incomplete for r in records)
    with open_store(db) as st:
        run = st.get_run("stopped")
        stored = list(st.iter_requests("stopped"))
    assert run.status == "interrupted" and run.status_reason == "stopped by SIGTERM"
    in_order = sorted(records, key=lambda r: r.request_index)
    assert stored == in_order  # the cut ones too, sent back after the SIGTERM


async def test_worker_process_streams_its_requests_to_the_parents_recorder(
    sched_server: Callable[..., Any], tmp_path: Path
) -> None:
    from store import RunRecorder, open_store

    server = sched_server(*FAST)
    db = tmp_path / "tui.db"
    spec = LoadSpec((ClosedLoop(2),), requests_per_level=4)
    workload, target = Workload(input_len=8, output_len=4), Target(server.url, "m", "vllm")
    setup = describe_run(spec, workload, target, origin="tui", name="from the TUI")
    with open_store(db) as st:
        worker = run_load_in_subprocess(
            spec, workload, target, setup=setup, record=RunRecorder(st), run_id="tui1"
        )
        async with aclosing(worker) as events:
            shown = [e async for e in events]
        assert isinstance(shown[-1], RunFinished)
        assert not any(isinstance(e, RequestRecord) for e in shown)  # they go to the recorder
    with open_store(db) as st:
        run = st.get_run("tui1")
        assert run.name == "from the TUI" and run.status == "completed"
        assert run.engine_kind == "vllm" and st.request_count("tui1") == 4
        assert run.profile["origin"] == "tui" and run.profile["spec"]["requests_per_level"] == 4


async def test_cancelling_a_run_records_every_request_in_flight_as_cut(
    sched_server: Callable[..., Any],
) -> None:
    """The TUI stopping a run (or Ctrl-C): nothing keeps running, nothing is lost."""
    server = sched_server("--ttft-ms", "20", "--ttft-spread-ms", "0", "--itl-ms", "300")
    sink = MemorySink()
    events: list[ProgressEvent] = []
    spec = LoadSpec((ClosedLoop(5),), requests_per_level=1000)
    task = asyncio.create_task(
        run_load(
            spec, Workload(input_len=8, output_len=4), Target(server.url, "m"), sink, events.append
        )
    )
    # Closed loop: each worker sends its next request in the same step that
    # records the last one, so once one answer is in, five are in flight.
    await apoll_until(lambda: any(r.ok for r in sink.records), "a first answer", timeout_s=60)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    cut = [r for r in sink.records if r.incomplete]
    assert len(cut) == 5 and all(r.error_kind is None for r in cut)
    assert any(r.ok and not r.incomplete for r in sink.records)
    before = len(sink.records)
    # A window in which nothing may happen: waiting on an event cannot show an absence.
    await asyncio.sleep(0.5)
    assert len(sink.records) == before  # no request outlived the run


async def test_warmup_by_time_leaves_out_what_was_sent_in_the_first_seconds(
    sched_server: Callable[..., Any],
) -> None:
    server = sched_server("--ttft-ms", "20", "--ttft-spread-ms", "0", "--itl-ms", "10")
    sink = MemorySink()
    spec = LoadSpec((ClosedLoop(1),), requests_per_level=3, warmup_s=1.0)
    result = await run_load(
        spec, Workload(input_len=8, output_len=4), Target(server.url, "m"), sink
    )
    warm = [r for r in sink.records if r.warmup]
    # ~50 ms each, so ~20 in the warm-up: fewer than 2 only if one took half a second.
    assert len(warm) >= 2 and result.levels[0].completed == 3
    assert max(r.sent_at for r in warm) < min(r.sent_at for r in sink.records if not r.warmup)


async def test_a_capped_open_loop_shows_its_queueing_in_latency_from_schedule(
    sched_server: Callable[..., Any],
) -> None:
    """No coordinated omission: requests held back by the cap keep their planned time."""
    server = sched_server("--ttft-ms", "100", "--ttft-spread-ms", "0", "--itl-ms", "10")
    sink = MemorySink()
    level = OpenLoop(50.0, Arrival.CONSTANT, max_concurrency=2)
    spec = LoadSpec((level,), requests_per_level=12)
    result = await run_load(
        spec, Workload(input_len=8, output_len=2), Target(server.url, "m"), sink
    )
    s = result.levels[0]
    assert s.concurrency == 2 and s.completed == 12
    waits = sorted(r.sent_at - r.scheduled_at for r in sink.records)
    assert waits[-1] > 0.3  # the last ones waited for a free slot (~110 ms per answer, 2 at once)
    assert s.ttft_from_schedule_s.p99 is not None and s.ttft_s.p99 is not None
    assert s.ttft_from_schedule_s.p99 > s.ttft_s.p99 + 0.2
    assert s.achieved_rate < 50.0 / 2  # what was really sent, not what was offered


async def test_live_progress_carries_itl_percentiles_before_the_level_ends(
    sched_server: Callable[..., Any],
) -> None:
    # One stream at a time, 4 chunks 20 ms apart: a level of ~1.5 s, several progress ticks.
    server = sched_server("--ttft-ms", "5", "--ttft-spread-ms", "0", "--itl-ms", "20")
    events: list[ProgressEvent] = []
    sink = MemorySink()
    spec = LoadSpec((ClosedLoop(1),), requests_per_level=16)
    await run_load(
        spec,
        Workload(input_len=8, output_len=4),
        Target(server.url, "m"),
        sink,
        events.append,
    )
    finished = next(i for i, e in enumerate(events) if isinstance(e, LevelFinished))
    live = [e for e in events[:finished] if isinstance(e, LevelProgress)]
    assert all(e.itl_p50_s is None for e in live if e.completed == 0)
    mid = [e for e in live if 0 < e.completed < 16]
    assert mid, "no progress event while the level ran"
    for event in mid:
        # One stream at a time: the first `completed` records are the ones the
        # event had seen.  Its live ITL is theirs, exactly (a small level keeps
        # every gap) — compared with the records, not with the server's plan,
        # since a descheduled server really does send late chunks together.
        gaps = sorted(g for r in sink.records[: event.completed] for g in r.itl_s)
        assert len(gaps) == 3 * event.completed
        assert event.itl_p50_s == pytest.approx(quantile(gaps, 0.5))
        assert event.itl_p99_s == pytest.approx(quantile(gaps, 0.99))
        assert 0 < event.itl_p50_s <= event.itl_p99_s
