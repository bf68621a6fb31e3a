"""Typed messages workers post to the app; only their handlers touch widgets."""

from __future__ import annotations

from dataclasses import dataclass

from textual.message import Message

from agents.protocol import EngineInfo
from alerts import Alert
from control.compare_view import CompareTable
from control.report_data import Report
from runs.events import ProgressEvent
from store import Comparison, LevelRow, RunInfo


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
    event: ProgressEvent


@dataclass
class LoadFinished(Message):
    run_id: str | None
    error: str | None
    """Why the run did not complete, in words."""
    status: str | None
    """How the run was stored (completed, failed, interrupted, or UNSAVED); None: nothing
    was."""


UNSAVED = "unsaved"
"""A LoadFinished status: the store could not write all of the run (a full disk)."""


@dataclass
class RunsChanged(Message, bubble=False):
    """The store changed (a run saved, deleted): lists re-read it.  It does not bubble:
    the app hands it to the screens that list runs."""


@dataclass
class RunsLoaded(Message, bubble=False):
    """A screen's worker read the stored runs (None: no store is configured)."""

    runs: list[RunInfo] | None


@dataclass
class LevelsLoaded(Message, bubble=False):
    run_id: str
    levels: list[LevelRow]


@dataclass
class ComparisonLoaded(Message, bubble=False):
    """The comparison of the picked runs (None: nothing picked), and its report (every
    level's figures with cost: the levels table and the HTML export)."""

    comparison: Comparison | None
    report: Report | None = None


@dataclass
class RegressionChecked(Message, bubble=False):
    """The newer of two picked runs judged against the older (``control.regression``)."""

    table: CompareTable
    findings: list[str]


@dataclass
class LogLine(Message):
    engine_id: str
    line: str


@dataclass
class EngineDetailLoaded(Message):
    """What the agent answered for the selected engine: its record and newest log lines
    (``note``: why either is missing)."""

    asked_for: tuple[str, str, object]
    """(node, engine id, its row's state) the answer was asked for: a later change of the
    row (a crash) asks again, and an answer to the earlier question is dropped."""
    info: EngineInfo | None
    log_lines: list[str]
    note: str | None = None


@dataclass
class StartupProgress(Message):
    text: str
    fraction: float | None
    done: bool = False


@dataclass
class AlertsLoaded(Message, bubble=False):
    """The past alerts, read from the store in a worker (or kept in memory without one)."""

    alerts: list[Alert]
