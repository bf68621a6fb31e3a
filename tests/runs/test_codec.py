"""The one codec of a run's events: every event type survives JSON unchanged (what the
agent writes to its event file, the control plane reads back and records)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable

import pytest

from runs.codec import CodecError, event_from_dict, event_to_dict
from runs.events import (
    LevelFinished,
    LevelProgress,
    LevelStarted,
    RunEvent,
    RunFailed,
    RunFinished,
    RunInterrupted,
    RunResult,
    RunStarted,
)
from runs.records import ErrorKind, LevelSummary, Percentiles, RequestRecord
from runs.setup import RunSetup

SETUP = RunSetup(
    origin="bench",
    engine_kind="llamacpp",
    model="m",
    url="http://127.0.0.1:8080",
    chat=True,
    spec={"levels": [{"concurrency": 1}], "requests_per_level": 4},
    workload={"input_len": 8},
    node="b",
    gpu_ids=(0, 1),
    load_node="b",
    path="node-local",
    software={"llamacpp": "b1"},
)
PCT = Percentiles(p50=0.1, p99=0.2, mean=0.15)
SUMMARY = LevelSummary(
    0,
    1,
    None,
    1.0,
    2.0,
    4,
    1,
    0,
    9.5,
    12.0,
    2.0,
    2.0,
    None,
    PCT,
    PCT,
    PCT,
    PCT,
    PCT,
    failures_by_kind={"timeout": 1},
)
RECORD = RequestRecord(
    "r1",
    0,
    3,
    1.0,
    1.01,
    1.1,
    1.5,
    8,
    4,
    4,
    4,
    4,
    itl_s=(0.1, 0.2),
    tokens_per_chunk=(1, 3),
    error_kind=ErrorKind.TIMEOUT,
    http_status=None,
    error_message="late",
    incomplete=True,
)
EVENTS: tuple[RunEvent, ...] = (
    RunStarted("r1", 1, ("no exact length",), SETUP, 1.0),
    LevelStarted(0, 1, None, 4, None),
    LevelProgress(0, 2, 1, 0, 1, 10.0, 0.1, None, {"timeout": 1}, 0.5, itl_p50_s=0.01),
    RECORD,
    LevelFinished(SUMMARY),
    RunFinished(RunResult("r1", 1.0, 2.0, (SUMMARY,), ("w",), 5)),
    RunFailed("boom"),
    RunInterrupted("stopped by SIGTERM"),
)


@pytest.mark.parametrize("event", EVENTS, ids=lambda e: type(e).__name__)
def test_every_run_event_survives_json_unchanged(event: RunEvent) -> None:
    assert event_from_dict(json.loads(json.dumps(event_to_dict(event)))) == event


def test_what_is_not_a_run_event_is_refused_in_words() -> None:
    with pytest.raises(CodecError, match="not a run event"):
        event_from_dict({"type": "Shutdown"})
    with pytest.raises(CodecError, match="malformed RunFailed"):
        event_from_dict({"type": "RunFailed"})


def _python_calls(fn: Callable[[], object]) -> int:
    calls = 0

    def count(_frame: object, event: str, _arg: object) -> None:
        nonlocal calls
        calls += event == "call"

    sys.setprofile(count)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return calls


def test_a_records_encoding_does_not_grow_with_its_tokens() -> None:
    """Every record a load run writes (JSONL, a node's stream, a worker's pipe) is encoded
    once: its cost must not be a Python call per token gap (``dataclasses.asdict``
    deep-copied each float: 0.8 ms a 200-token record, a fifth of the load generator's CPU
    at 51,200 tok/s).  Counted in calls, so a slow machine cannot fail it."""

    def record(tokens: int) -> RequestRecord:
        gaps, sizes = (0.005,) * (tokens - 1), (1,) * tokens
        return RequestRecord("r", 0, 1, 0.0, 0.0, 0.1, 1.0, 8, tokens, tokens, tokens, tokens,
                             itl_s=gaps, tokens_per_chunk=sizes)  # fmt: skip

    short, long = record(2), record(2000)
    assert event_from_dict(json.loads(json.dumps(event_to_dict(long)))) == long
    short_calls = _python_calls(lambda: event_to_dict(short))
    long_calls = _python_calls(lambda: event_to_dict(long))
    assert long_calls <= short_calls + 5, (short_calls, long_calls)
