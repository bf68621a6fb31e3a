"""The one writer of a load run: its events in, its rows out (docs/design.md,
"The run path").

``infer-top bench``, the TUI's Load screen and the demo all hand a run's events
(``runs.events``) to a ``RunRecorder``: ``RunStarted`` creates the run row from
its ``RunSetup`` (one profile schema for every origin) and the deployment that
names the engine's GPUs (the store reads their energy over the run's window),
every ``RequestRecord`` and ``LevelFinished`` is written as it comes, and the
end event closes the run with its status and, when it did not complete, why.
Writes only enqueue to the store's writer thread: ``on_event`` never blocks.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from runs.events import (
    LevelFinished,
    LevelProgress,
    LevelStarted,
    RunEvent,
    RunFailed,
    RunFinished,
    RunInterrupted,
    RunStarted,
)
from runs.records import LevelSummary, RequestRecord, failures_by_kind, first_failure_sample
from runs.setup import RunSetup
from store.store import Store


class RunRecorder:
    """Records one run.  With no store (a TUI without one) it only follows the
    run's outcome, which the caller shows."""

    def __init__(self, store: Store | None) -> None:
        self.store = store
        self.run_id: str | None = None
        self.status: str | None = None
        """None while the run goes on; then completed, failed or interrupted."""
        self.reason: str | None = None
        """Why the run did not complete, in words."""
        self._levels: list[LevelSummary] = []
        self._stopped_because: str | None = None

    @property
    def finished(self) -> bool:
        return self.status is not None

    def on_event(self, event: RunEvent) -> None:
        if self.finished:
            return  # the run is closed: a late message changes nothing stored
        match event:
            case RunStarted(run_id=run_id, setup=setup, started_at=started_at):
                self._start(run_id, setup, started_at)
            case RequestRecord():
                if self.store is not None and self.run_id is not None:
                    self.store.add_request(event)
            case LevelFinished(summary=summary):
                self._levels.append(summary)
                if self.store is not None and self.run_id is not None:
                    self.store.add_level(self.run_id, summary)
            case RunFinished(result=result):
                status, reason = judge(self._levels)
                self._close(status, reason, at=result.ended_at)
            case RunFailed(message=message):
                self._close("failed", message)
            case RunInterrupted(reason=reason):
                self._close("interrupted", reason)
            case LevelStarted() | LevelProgress():
                pass  # live display only

    def stopping(self, reason: str) -> None:
        """The caller is stopping the run (an operator's cancel): whatever end comes next,
        after the cut requests, closes it as interrupted with this reason.  The stop
        reaches the worker a moment later (over a queue, or the node's agent), so its
        last level may still finish meanwhile and the worker may say ``RunFinished``: the
        operator's cancel, given while the run went on, still decides how it is kept
        (the worker only knows that it was told to stop, or not even that)."""
        if not self.finished:
            self._stopped_because = reason

    def abandon(self, reason: str, status: str = "failed") -> None:
        """Close a run that ended without its end event (the caller's own error)."""
        if not self.finished:
            self._close(status, reason)

    def _start(self, run_id: str, setup: RunSetup, started_at: float) -> None:
        self.run_id = run_id
        if self.store is None:
            return
        if setup.node is not None and setup.deployment_id is not None:
            # The deployment names the engine's GPUs: the store sums only their energy.
            self.store.add_deployment(
                node=setup.node,
                engine_kind=setup.engine_kind,
                gpus=list(setup.gpu_ids) or None,
                simulated=setup.simulated,
                deployment_id=setup.deployment_id,
                launch_config={"model": setup.model, "url": setup.url},
            )
        self.store.create_run(
            run_id=run_id,
            name=setup.label,
            engine_kind=setup.engine_kind,
            node=setup.node,
            deployment_id=setup.deployment_id,
            profile=setup.profile(),
            workload=setup.workload,
            simulated=setup.simulated,
            software_versions=setup.software,
            created_at=started_at,
        )

    def _close(self, status: str, reason: str | None, at: float | None = None) -> None:
        if self._stopped_because is not None:
            status, reason = "interrupted", self._stopped_because
        self.status, self.reason = status, reason
        if self.store is not None and self.run_id is not None:
            ended = time.time() if at is None else at
            self.store.finish_run(self.run_id, status, at=ended, reason=reason)


def judge(levels: Sequence[LevelSummary]) -> tuple[str, str | None]:
    """A run that went to its end is ``completed`` when some measured request
    completed; else ``failed``, with the failures by kind and the engine's own words
    for the commonest (a run whose every request failed measured nothing: it must not
    pass for a result)."""
    completed = sum(s.completed for s in levels)
    if completed:
        return "completed", None
    failed = sum(s.failed for s in levels)
    cut = sum(s.incomplete for s in levels)
    by_kind = failures_by_kind(levels)
    sample = first_failure_sample(levels)
    if sample:
        by_kind += f" — {sample}"
    if failed and not cut:
        return "failed", f"all {failed} requests failed: {by_kind}"
    if failed:
        return "failed", f"no request completed: {failed} failed ({by_kind}), {cut} cut"
    if cut:
        return "failed", f"no request completed: all {cut} were cut at their level's end"
    return "failed", "no request was measured"
