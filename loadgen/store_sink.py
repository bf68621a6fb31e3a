"""The store as a record sink: a run row, its requests as they finish, its levels.

The store's writer queues rows and writes them from its own thread, so
``write`` never blocks the load generator's loop on SQLite.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from runs.records import LevelSummary, RequestRecord


class StoreSink:
    def __init__(self, store: Any, run_id: str, *, owns_store: bool) -> None:
        self.store = store
        self.run_id = run_id
        self.status = "completed"
        """What ``close`` records; set to "failed" / "interrupted" by the caller."""
        self._owns_store = owns_store

    @classmethod
    def open(
        cls,
        path: str | Path | None,
        *,
        run_id: str,
        name: str | None = None,
        engine_kind: str | None = None,
        profile: Mapping[str, Any] | None = None,
        workload: Mapping[str, Any] | None = None,
    ) -> StoreSink:
        """Open the store (None: its default path) and create the run row."""
        from store import open_store  # only a saving run needs SQLite

        store = open_store(path)
        store.create_run(
            run_id=run_id, name=name, engine_kind=engine_kind, profile=profile, workload=workload
        )
        return cls(store, run_id, owns_store=True)

    def write(self, record: RequestRecord) -> None:
        self.store.add_request(record)

    def level(self, summary: LevelSummary) -> None:
        self.store.add_level(self.run_id, summary)

    def close(self) -> None:
        self.store.finish_run(self.run_id, self.status)
        if self._owns_store:
            self.store.close()
