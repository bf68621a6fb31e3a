"""Save a load test run to the store as its progress events arrive (no Textual).

The run row carries what the operator picked (node, engine, simulated) so the
Compare and History screens can label it; levels are saved as they finish, so
a run cut short keeps what it measured.
"""

from __future__ import annotations

from dataclasses import asdict

from control.loads import LoadRequest
from runs.events import LevelFinished, ProgressEvent, RunFailed, RunFinished, RunStarted
from store import Store


class RunRecorder:
    def __init__(self, store: Store | None, request: LoadRequest) -> None:
        self.store = store
        self.request = request
        self.run_id: str | None = None
        self.error: str | None = None
        self.finished = False

    def on_event(self, event: ProgressEvent) -> None:
        if isinstance(event, RunStarted):
            self.run_id = event.run_id
            if self.store is not None:
                r = self.request
                # the deployment names the engine's GPUs: the store sums only their energy
                self.store.add_deployment(
                    node=r.node,
                    engine_kind=r.engine_kind,
                    gpus=list(r.gpu_ids) or None,
                    simulated=r.simulated,
                    deployment_id=r.engine_id,
                    launch_config={"model": r.model, "url": r.url},
                )
                self.store.create_run(
                    run_id=event.run_id,
                    name=f"{r.engine_kind} {r.engine_id}",
                    engine_kind=r.engine_kind,
                    node=r.node,
                    deployment_id=r.engine_id,
                    profile=asdict(r.profile),
                    simulated=r.simulated,
                    workload={
                        "input_len": r.profile.input_len,
                        "output_len": r.profile.output_len,
                        "model": r.model,
                    },
                )
        elif isinstance(event, LevelFinished):
            if self.store is not None and self.run_id:
                self.store.add_level(self.run_id, event.summary)
        elif isinstance(event, RunFinished):
            self._close("completed")
        elif isinstance(event, RunFailed):
            self.error = event.message
            self._close("failed")

    def fail(self, message: str) -> None:
        self.error = message
        self._close("failed")

    def finish(self) -> tuple[str | None, str | None]:
        if not self.finished:
            self.fail(self.error or "the load test ended without a result")
        return self.run_id, self.error

    def _close(self, status: str) -> None:
        if self.finished:
            return
        self.finished = True
        if self.store is not None and self.run_id:
            self.store.finish_run(self.run_id, status)
