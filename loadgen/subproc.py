"""Run a load test in a process of its own and stream its progress back.

The TUI iterates ``run_load_in_subprocess(...)`` from its own event loop; the
client, its sockets and its CPU use live in a ``spawn``-ed worker, so a busy
load test never makes the interface stutter (and vice versa).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import multiprocessing
import queue as queue_mod
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import Any

from loadgen.process import TermAsInterrupt, new_run_id, run_in_new_loop
from loadgen.profiles import LoadSpec
from loadgen.runner import Target, run_load
from loadgen.sinks import FanoutSink, JsonlSink, RecordSink
from loadgen.store_sink import StoreSink
from loadgen.workload import Workload
from runs.events import ProgressEvent, RunFailed, RunFinished

_POLL_S = 0.25


@dataclass(frozen=True, slots=True)
class SinkSpec:
    """Where the worker writes records (sinks are opened in the worker process)."""

    jsonl_path: str | None = None
    save_to_store: bool = False
    """Save to the store at its default path (``$INFER_TOP_DB`` or the XDG data dir)."""
    store_path: str | None = None
    """Save to the store at this path (implies saving)."""
    run_name: str | None = None


def open_sinks(
    where: SinkSpec, run_id: str, spec: LoadSpec, workload: Workload, target: Target
) -> tuple[FanoutSink, StoreSink | None]:
    """The sinks ``where`` asks for, and the store sink among them (to mark its status)."""
    sinks: list[RecordSink] = []
    if where.jsonl_path:
        sinks.append(JsonlSink(where.jsonl_path))
    store_sink = None
    if where.save_to_store or where.store_path:
        store_sink = StoreSink.open(
            where.store_path,
            run_id=run_id,
            name=where.run_name or f"{target.engine_kind} {target.model}",
            engine_kind=target.engine_kind,
            profile=plain(spec),
            workload=plain(workload),
        )
        sinks.append(store_sink)
    return FanoutSink(*sinks), store_sink


def plain(value: Any) -> dict[str, Any]:
    """A frozen dataclass as JSON-ready data (enums as their values)."""
    data: dict[str, Any] = json.loads(json.dumps(dataclasses.asdict(value), default=str))
    return data


def _worker(
    spec: LoadSpec,
    workload: Workload,
    target: Target,
    where: SinkSpec,
    run_id: str,
    events: Any,
) -> None:
    sink: RecordSink | None = None
    store_sink: StoreSink | None = None
    try:
        sink, store_sink = open_sinks(where, run_id, spec, workload, target)
        # The parent stops a run it dropped with SIGTERM: cut requests are kept.
        with TermAsInterrupt():
            run_in_new_loop(run_load(spec, workload, target, sink, events.put, run_id=run_id))
    except BaseException as exc:  # report everything: the parent only sees the queue
        if store_sink is not None:
            store_sink.status = "interrupted" if isinstance(exc, KeyboardInterrupt) else "failed"
        events.put(RunFailed(f"{type(exc).__name__}: {exc}"))
    finally:
        if sink is not None:
            sink.close()
        events.put(None)


async def run_load_in_subprocess(
    spec: LoadSpec,
    workload: Workload,
    target: Target,
    where: SinkSpec | None = None,
    *,
    run_id: str | None = None,
) -> AsyncGenerator[ProgressEvent, None]:
    """Yield the worker's progress events; the last is RunFinished or RunFailed.

    Closing the iterator early stops the worker: use ``contextlib.aclosing`` so a
    ``break`` closes it at once (a bare ``async for`` only closes it when the
    generator is garbage-collected).
    """
    ctx = multiprocessing.get_context("spawn")
    events = ctx.Queue()
    proc = ctx.Process(
        target=_worker,
        args=(spec, workload, target, where or SinkSpec(), run_id or new_run_id(), events),
        name="infer-top-loadgen",
        daemon=True,
    )
    proc.start()
    ended = False
    try:
        while True:
            event = await asyncio.to_thread(_next_event, events, proc)
            if event is None:
                ended = True
                return
            ended = isinstance(event, RunFinished | RunFailed)
            yield event
            if ended:
                return
    finally:
        # A finished worker is still closing its sinks: let it; a dropped one is stopped.
        await asyncio.to_thread(proc.join, 10.0 if ended else 0.0)
        if proc.is_alive():
            proc.terminate()
            await asyncio.to_thread(proc.join, 5.0)


def _next_event(events: Any, proc: Any) -> ProgressEvent | None:
    while True:
        try:
            event: ProgressEvent | None = events.get(timeout=_POLL_S)
        except queue_mod.Empty:
            if proc.is_alive():
                continue
            try:  # it may have flushed its last events just before exiting
                return events.get(timeout=_POLL_S)  # type: ignore[no-any-return]
            except queue_mod.Empty:
                return RunFailed(f"the load-test worker exited (code {proc.exitcode})")
        return event
