"""Typed messages workers post to the app; only their handlers touch widgets."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from textual.message import Message


class FleetChanged(Message):
    """The fleet model has news.  Posted at most once until handled (coalesced):
    the handler reads the newest frames, so none go stale in a queue."""


@dataclass
class EngineActionDone(Message):
    node: str
    action: str
    ok: bool
    text: str


@dataclass
class EngineProgress(Message):
    text: str
    fraction: float | None = None


@dataclass
class LoadProgress(Message):
    event: Any


@dataclass
class LoadFinished(Message):
    run_id: str | None
    error: str | None


@dataclass
class RunsChanged(Message):
    """The store changed (a run saved, deleted): lists re-read it."""


@dataclass
class LogLine(Message):
    engine_id: str
    line: str


@dataclass
class StartupProgress(Message):
    text: str
    fraction: float | None
    done: bool = False
