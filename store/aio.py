"""``AsyncStore``: the store for code on an asyncio loop (the TUI).

Writes only enqueue, so they stay plain methods; reads, flush and
maintenance run in a worker thread (``asyncio.to_thread``) so a slow query or
a VACUUM never stalls the loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from runs.records import LevelSummary, RequestRecord
from store.fleet import DeploymentInfo, EventInfo, GpuPoint, NodeInfo
from store.maintenance import PruneResult
from store.models import Comparison, LevelRow, Regression, RunInfo
from store.store import Store, open_store
from telemetry import TelemetryFrame


class AsyncStore:
    def __init__(self, store: Store) -> None:
        self.store = store

    @classmethod
    async def open(cls, path: Path | str | None = None, **options: Any) -> AsyncStore:
        """``open_store`` in a worker thread: migrating a big file takes a while."""
        return cls(await asyncio.to_thread(open_store, path, **options))

    # Writes: enqueue only, safe to call on the loop.
    def create_run(self, **fields: Any) -> str:
        return self.store.create_run(**fields)

    def add_request(self, record: RequestRecord) -> None:
        self.store.add_request(record)

    def add_requests(self, records: Iterable[RequestRecord]) -> None:
        self.store.add_requests(records)

    def add_level(self, run_id: str, summary: LevelSummary) -> None:
        self.store.add_level(run_id, summary)

    def finish_run(self, run_id: str, status: str = "completed") -> None:
        self.store.finish_run(run_id, status)

    def add_telemetry(self, frames: Iterable[TelemetryFrame]) -> None:
        self.store.add_telemetry(frames)

    def add_event(self, node: str, kind: str, **fields: Any) -> None:
        self.store.add_event(node, kind, **fields)

    def upsert_node(self, name: str, **fields: Any) -> None:
        self.store.upsert_node(name, **fields)

    def add_deployment(self, **fields: Any) -> str:
        return self.store.add_deployment(**fields)

    # Everything that waits: in a worker thread.
    async def flush(self, timeout_s: float | None = 30.0) -> None:
        await asyncio.to_thread(self.store.flush, timeout_s)

    async def close(self) -> None:
        await asyncio.to_thread(self.store.close)

    async def list_runs(self, **filters: Any) -> list[RunInfo]:
        return await asyncio.to_thread(self.store.list_runs, **filters)

    async def get_run(self, run_id: str) -> RunInfo:
        return await asyncio.to_thread(self.store.get_run, run_id)

    async def levels(self, run_id: str) -> list[LevelRow]:
        return await asyncio.to_thread(self.store.levels, run_id)

    async def compare(self, run_ids: Sequence[str]) -> Comparison:
        return await asyncio.to_thread(self.store.compare, run_ids)

    async def regressions(
        self, base_run: str, new_run: str, threshold: float = 0.05
    ) -> list[Regression]:
        return await asyncio.to_thread(self.store.regressions, base_run, new_run, threshold)

    async def requests(self, run_id: str) -> list[RequestRecord]:
        return await asyncio.to_thread(lambda: list(self.store.iter_requests(run_id)))

    async def nodes(self) -> list[NodeInfo]:
        return await asyncio.to_thread(self.store.nodes)

    async def deployments(self, node: str | None = None) -> list[DeploymentInfo]:
        return await asyncio.to_thread(self.store.deployments, node)

    async def events(
        self, node: str | None = None, since: float | None = None, limit: int = 200
    ) -> list[EventInfo]:
        return await asyncio.to_thread(self.store.events, node, since, limit)

    async def gpu_series(
        self, node: str, gpu_index: int, start: float, end: float
    ) -> list[GpuPoint]:
        return await asyncio.to_thread(self.store.gpu_series, node, gpu_index, start, end)

    async def delete_run(self, run_id: str) -> int:
        return await asyncio.to_thread(self.store.delete_run, run_id)

    async def prune_telemetry(self, older_than_s: float) -> PruneResult:
        return await asyncio.to_thread(self.store.prune_telemetry, older_than_s)

    async def vacuum(self) -> tuple[int, int]:
        return await asyncio.to_thread(self.store.vacuum)
