"""Progress events a running load test emits for live display (TUI, CLI bar)."""

from __future__ import annotations

from dataclasses import dataclass

from runs.records import LevelSummary


@dataclass(frozen=True, slots=True)
class RunStarted:
    run_id: str
    levels: int
    warnings: tuple[str, ...]
    """E.g. that the engine cannot force the output length."""


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
    of their gaps: ``stats.GapSample``); None until a request streamed two chunks."""
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


ProgressEvent = RunStarted | LevelStarted | LevelProgress | LevelFinished | RunFinished | RunFailed
