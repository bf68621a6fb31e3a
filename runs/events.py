"""The typed events a load run emits: for live display (TUI, CLI bar) and for the
one recorder that stores the run (``store.recorder``; docs/design.md, "The run path").

A run emits ``RunStarted`` (with its ``RunSetup``), per level ``LevelStarted``,
``LevelProgress`` ticks and ``LevelFinished``, every finished request as its
``RequestRecord``, and ends with exactly one of ``RunFinished``, ``RunFailed``
or ``RunInterrupted``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from runs.records import LevelSummary, RequestRecord
from runs.setup import RunSetup


@dataclass(frozen=True, slots=True)
class RunStarted:
    run_id: str
    levels: int
    warnings: tuple[str, ...]
    """E.g. that the engine cannot force the output length."""
    setup: RunSetup
    started_at: float
    """Epoch seconds (the demo's runs start in the past, in virtual time)."""


@dataclass(frozen=True, slots=True)
class LevelStarted:
    level_index: int
    concurrency: int | None
    request_rate: float | None
    planned_requests: int | None
    """Measured requests the level will send (None when it stops by duration)."""
    duration_s: float | None


@dataclass(frozen=True, slots=True)
class LevelProgress:
    level_index: int
    completed: int
    failed: int
    incomplete: int
    in_flight: int
    output_tok_s: float
    """Output tokens per second over the last few seconds."""
    ttft_p50_s: float | None
    ttft_p99_s: float | None
    errors_by_kind: dict[str, int]
    elapsed_s: float
    itl_p50_s: float | None = None
    """Inter-token latency so far over the level's finished requests (a bounded sample
    of their gaps: ``stats.StridedSample``); None until a request streamed two chunks."""
    itl_p99_s: float | None = None


@dataclass(frozen=True, slots=True)
class LevelFinished:
    summary: LevelSummary


@dataclass(frozen=True, slots=True)
class RunResult:
    run_id: str
    started_at: float
    ended_at: float
    levels: tuple[LevelSummary, ...]
    warnings: tuple[str, ...]
    records_written: int


@dataclass(frozen=True, slots=True)
class RunFinished:
    result: RunResult


@dataclass(frozen=True, slots=True)
class RunFailed:
    """The run could not go on (bad dataset, sink error, crash in the worker process)."""

    message: str


@dataclass(frozen=True, slots=True)
class RunInterrupted:
    """Stopped from outside (Ctrl-C, SIGTERM, the TUI closing the run): requests in
    flight were recorded as cut before this event."""

    reason: str


ProgressEvent = (
    RunStarted
    | LevelStarted
    | LevelProgress
    | LevelFinished
    | RunFinished
    | RunFailed
    | RunInterrupted
)
RunEvent = ProgressEvent | RequestRecord
"""Everything a run emits; the recorder takes them all."""

END_EVENTS = (RunFinished, RunFailed, RunInterrupted)


class RunEventSink(Protocol):
    """Takes a run's events as they happen: the store's recorder, or anything
    that follows a run.  The load generator emits to it without knowing the store."""

    def on_event(self, event: RunEvent, /) -> None: ...
