"""Run a load test in a process of its own and stream its events back.

The TUI iterates ``run_load_in_subprocess(...)`` from its own event loop; the
client, its sockets and its CPU use live in a ``spawn``-ed worker, so a busy
load test never makes the interface stutter (and vice versa).  The worker
never opens the store: it sends its progress events and its finished requests
(in batches) back over a bounded queue, and the parent hands every one to its
``record`` sink (the store's recorder) — also those that arrive after the
caller stopped iterating, so a stopped run keeps its requests in flight as cut.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import queue as queue_mod
import time
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import Any

from loadgen.process import TermAsInterrupt, new_run_id, run_in_new_loop
from loadgen.profiles import LoadSpec
from loadgen.runner import Target, run_load
from loadgen.sinks import FanoutSink, JsonlSink, RecordSink
from loadgen.workload import Workload
from runs.events import (
    END_EVENTS,
    ProgressEvent,
    RunEvent,
    RunEventSink,
    RunFailed,
    RunInterrupted,
)
from runs.records import RequestRecord
from runs.setup import RunSetup

_POLL_S = 0.25
BATCH_RECORDS = 256
"""Finished requests per message; a batch also leaves before every progress event
(one every half second), so the parent is never more than that behind."""
QUEUE_MESSAGES = 1024
"""Bound of the worker -> parent queue: a parent that stops reading holds the
worker back rather than letting it grow without limit."""
STOP_DRAIN_S = 30.0
"""How long a stopped worker gets to record its cut requests and say so."""


@dataclass(frozen=True, slots=True)
class _Records:
    """Finished requests on their way to the parent."""

    records: tuple[RequestRecord, ...]


_Message = ProgressEvent | _Records | None
"""None: the worker has said everything."""


class _Forwarder:
    """The worker's event callback: events at once, finished requests in batches,
    a level's requests always before the event that follows them."""

    def __init__(self, out: Any) -> None:
        self.out = out
        self.batch: list[RequestRecord] = []

    def __call__(self, event: RunEvent) -> None:
        if isinstance(event, RequestRecord):
            self.batch.append(event)
            if len(self.batch) >= BATCH_RECORDS:
                self.flush()
            return
        self.flush()
        self.out.put(event)

    def flush(self) -> None:
        if self.batch:
            self.out.put(_Records(tuple(self.batch)))
            self.batch = []


def _worker(
    spec: LoadSpec,
    workload: Workload,
    target: Target,
    setup: RunSetup | None,
    jsonl_path: str | None,
    run_id: str,
    start_at: float | None,
    out: Any,
) -> None:
    forward = _Forwarder(out)
    sink: RecordSink | None = None
    term = TermAsInterrupt()
    try:
        sink = JsonlSink(jsonl_path) if jsonl_path else FanoutSink()
        # The parent stops a run it dropped with SIGTERM: cut requests are kept.
        with term:
            run_in_new_loop(
                run_load(
                    spec,
                    workload,
                    target,
                    sink,
                    forward,
                    run_id=run_id,
                    setup=setup,
                    start_at=start_at,
                )
            )
    except KeyboardInterrupt:
        forward(RunInterrupted("stopped by SIGTERM" if term.received else "stopped by Ctrl-C"))
    except BaseException as exc:  # report everything: the parent only sees the queue
        forward(RunFailed(f"{type(exc).__name__}: {exc}"))
    finally:
        try:
            if sink is not None:
                sink.close()
        finally:
            forward.flush()
            out.put(None)


async def run_load_in_subprocess(
    spec: LoadSpec,
    workload: Workload,
    target: Target,
    *,
    setup: RunSetup | None = None,
    record: RunEventSink | None = None,
    jsonl_path: str | None = None,
    run_id: str | None = None,
    start_at: float | None = None,
) -> AsyncGenerator[ProgressEvent, None]:
    """Yield the worker's progress events; the last is RunFinished, RunFailed or
    RunInterrupted.  ``record`` gets every event, finished requests included;
    ``start_at`` is ``run_load``'s.

    Closing the iterator early stops the worker (SIGTERM): its requests in flight
    are recorded as cut and reach ``record`` with a final ``RunInterrupted``.  Use
    ``contextlib.aclosing`` so a ``break`` closes it at once (a bare ``async for``
    only closes it when the generator is garbage-collected).
    """
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue(QUEUE_MESSAGES)
    proc = ctx.Process(
        target=_worker,
        args=(spec, workload, target, setup, jsonl_path, run_id or new_run_id(), start_at, out),
        name="infer-top-loadgen",
        daemon=True,
    )
    proc.start()
    ended = said_all = False
    reading: asyncio.Future[_Message | _Quiet] | None = None
    try:
        while True:
            # Shielded: a caller cancelled mid-read does not lose the message the
            # thread is taking (the finally below still delivers it).
            reading = asyncio.ensure_future(asyncio.to_thread(_get, out))
            message = await asyncio.shield(reading)
            reading = None
            if isinstance(message, _Quiet):
                if proc.is_alive():
                    continue
                message = await asyncio.to_thread(_get, out)  # its last words, if any
                if isinstance(message, _Quiet):
                    message = _exited(proc)
            if message is None:
                said_all = True
                return
            _deliver(message, record)
            if isinstance(message, _Records):
                continue
            ended = isinstance(message, END_EVENTS)
            yield message
            if ended:
                return
    finally:
        if reading is not None:
            last = await reading  # within _POLL_S
            if last is None:
                said_all = True
            elif not isinstance(last, _Quiet):
                _deliver(last, record)
                ended = ended or isinstance(last, END_EVENTS)
        if not said_all:
            await asyncio.to_thread(_drain, out, proc, record, stop=not ended)
        await asyncio.to_thread(proc.join, 10.0)
        if proc.is_alive():
            proc.kill()
            await asyncio.to_thread(proc.join, 5.0)


class _Quiet:
    """Nothing came within ``_POLL_S``."""


QUIET = _Quiet()


def _get(out: Any, timeout_s: float = _POLL_S) -> _Message | _Quiet:
    try:
        message: _Message = out.get(timeout=timeout_s)
    except queue_mod.Empty:
        return QUIET
    return message


def _exited(proc: Any) -> RunFailed:
    return RunFailed(f"the load-test worker exited (code {proc.exitcode})")


def _deliver(message: ProgressEvent | _Records, record: RunEventSink | None) -> None:
    if record is None:
        return
    if isinstance(message, _Records):
        for r in message.records:
            record.on_event(r)
    else:
        record.on_event(message)


def _drain(out: Any, proc: Any, record: RunEventSink | None, *, stop: bool) -> None:
    """Take the worker's last messages until it has said everything.

    ``stop``: the caller left before the run's end.  What the worker already
    queued is taken first (its end may be among it); then it gets SIGTERM and
    records its requests in flight as cut.  A worker must be read to the end
    before it is joined: it cannot exit with data still in its pipe."""
    end_seen = signalled = not stop
    deadline = time.monotonic() + STOP_DRAIN_S
    while time.monotonic() < deadline:
        message = _get(out, _POLL_S if signalled else 0.0)
        if isinstance(message, _Quiet):
            if not signalled:
                signalled = True
                if proc.is_alive():
                    proc.terminate()
                continue
            if proc.is_alive():
                continue
            message = _get(out)  # its last words may have landed as it exited
            if isinstance(message, _Quiet):
                if not end_seen:  # it died without a word
                    _deliver(_exited(proc), record)
                return
        if message is None:
            return
        _deliver(message, record)
        if isinstance(message, END_EVENTS):
            end_seen = signalled = True  # it ended by itself: nothing to stop
    if not end_seen:
        _deliver(RunInterrupted(f"the load-test worker did not stop in {STOP_DRAIN_S:g} s"), record)
