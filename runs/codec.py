"""A run's events as JSON-ready data and back: the one codec for every place a run's
events leave a process (the load-test JSONL sink, the agent's node-side load runs and the
control plane that records them; docs/design.md, "The run path").

Each event is one object with a ``type`` naming its class; a value decodes to the same
frozen dataclass it was encoded from (enums by their values, tuples from lists)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

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
from runs.records import TOKEN_FIELDS, ErrorKind, LevelSummary, Percentiles, RequestRecord
from runs.setup import LoadNodeShare, RunSetup


class CodecError(ValueError):
    """Data that is not an encoded run event."""


def _known(cls: type, data: dict[str, Any]) -> dict[str, Any]:
    """The fields ``cls`` declares (a newer sender's extra fields are ignored)."""
    names = {f.name for f in dataclasses.fields(cls)}
    return {k: v for k, v in data.items() if k in names}


_RECORD_FIELDS = tuple(f.name for f in dataclasses.fields(RequestRecord))


def record_to_dict(record: RequestRecord) -> dict[str, Any]:
    # Field by field, not ``dataclasses.asdict``: a record holds only scalars and tuples
    # of scalars, which asdict deep-copies one by one (a 200-token answer's gaps and
    # chunk sizes cost the load generator more CPU than the whole record's other work).
    data = {name: getattr(record, name) for name in _RECORD_FIELDS}
    data["error_kind"] = None if record.error_kind is None else str(record.error_kind)
    return data


def record_from_dict(data: dict[str, Any]) -> RequestRecord:
    values = _known(RequestRecord, data)
    values["itl_s"] = tuple(values.get("itl_s", ()))
    values["tokens_per_chunk"] = tuple(values.get("tokens_per_chunk", ()))
    kind = values.get("error_kind")
    values["error_kind"] = None if kind is None else ErrorKind(kind)
    return RequestRecord(**values)


def summary_to_dict(summary: LevelSummary) -> dict[str, Any]:
    data = dataclasses.asdict(summary)
    data["failure_rate"] = summary.failure_rate
    return data


def summary_from_dict(data: dict[str, Any]) -> LevelSummary:
    values = _known(LevelSummary, data)
    for name in ("ttft_s", "tpot_s", "itl_s", "e2e_s", "ttft_from_schedule_s"):
        values[name] = Percentiles(**values[name])
    for name in TOKEN_FIELDS:  # absent from an older sender's summaries
        values[name] = Percentiles(**values.get(name, {}))
    return LevelSummary(**values)


def setup_from_dict(data: dict[str, Any]) -> RunSetup:
    values = _known(RunSetup, data)
    values["gpu_ids"] = tuple(values.get("gpu_ids", ()))
    values["load_nodes"] = tuple(
        LoadNodeShare(**_known(LoadNodeShare, share)) for share in values.get("load_nodes", ())
    )
    return RunSetup(**values)


def _started(data: dict[str, Any]) -> RunStarted:
    values = _known(RunStarted, data)
    values["warnings"] = tuple(values["warnings"])
    values["setup"] = setup_from_dict(values["setup"])
    return RunStarted(**values)


def _finished(data: dict[str, Any]) -> RunFinished:
    values = _known(RunResult, data["result"])
    values["levels"] = tuple(summary_from_dict(s) for s in values["levels"])
    values["warnings"] = tuple(values["warnings"])
    return RunFinished(RunResult(**values))


_DECODERS: dict[str, Callable[[dict[str, Any]], RunEvent]] = {
    "RequestRecord": record_from_dict,
    "RunStarted": _started,
    "LevelStarted": lambda d: LevelStarted(**_known(LevelStarted, d)),
    "LevelProgress": lambda d: LevelProgress(**_known(LevelProgress, d)),
    "LevelFinished": lambda d: LevelFinished(summary_from_dict(d["summary"])),
    "RunFinished": _finished,
    "RunFailed": lambda d: RunFailed(str(d["message"])),
    "RunInterrupted": lambda d: RunInterrupted(str(d["reason"])),
}


def event_to_dict(event: RunEvent) -> dict[str, Any]:
    """``event`` as JSON-ready data with its ``type``."""
    if isinstance(event, RequestRecord):
        data = record_to_dict(event)
    else:
        data = dataclasses.asdict(event)
    return {"type": type(event).__name__, **data}


def event_from_dict(data: dict[str, Any]) -> RunEvent:
    """The event ``data`` encodes; CodecError when it encodes none."""
    decode = _DECODERS.get(str(data.get("type")))
    if decode is None:
        raise CodecError(f"not a run event: type {data.get('type')!r}")
    try:
        return decode(data)
    except (KeyError, TypeError, ValueError) as exc:
        raise CodecError(f"a malformed {data['type']} event: {exc}") from exc
