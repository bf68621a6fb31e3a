"""The fleet side of the store: engine deployments and telemetry.

A mixin of ``Store``: writes enqueue to the writer thread like every other
write; reads use the store's read connection.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from store.energy import INVALIDATE_SQL, SETTLE_S
from store.samples import SAMPLE_TABLES
from store.writer import Writer
from telemetry import TelemetryFrame


def dumps(value: Mapping[str, Any] | Sequence[Any] | None) -> str | None:
    return None if value is None else json.dumps(value, sort_keys=True, default=str)


class FleetMixin:
    _writer: Writer
    _maybe_prune: Callable[[], None]

    def add_telemetry(self, frames: Iterable[TelemetryFrame]) -> None:
        """Keep each frame's GPU and engine samples: the fields ``telemetry.frames``
        marks stored (``store.samples``)."""
        batches: list[list[tuple[Any, ...]]] = [[] for _ in SAMPLE_TABLES]
        late_before = time.time() - SETTLE_S
        late: dict[str, tuple[float, float]] = {}  # node -> ts range of late GPU samples
        for frame in frames:
            if frame.gpus and frame.ts < late_before:
                lo, hi = late.get(frame.node, (frame.ts, frame.ts))
                late[frame.node] = (min(lo, frame.ts), max(hi, frame.ts))
            for table, batch in zip(SAMPLE_TABLES, batches, strict=True):
                batch += table.rows(frame)
        for table, batch in zip(SAMPLE_TABLES, batches, strict=True):
            if batch:
                self._writer.put_rows(table.insert_sql, batch)
        if late:
            # Samples for windows already settled: their cached figures are stale.
            self._writer.put_rows(
                INVALIDATE_SQL, [(node, lo, hi) for node, (lo, hi) in late.items()]
            )
        self._maybe_prune()

    def add_deployment(
        self,
        *,
        node: str,
        engine_kind: str,
        image: str | None = None,
        launch_config: Mapping[str, Any] | None = None,
        gpus: Sequence[int] | None = None,
        simulated: bool = False,
        started_at: float | None = None,
        deployment_id: str | None = None,
    ) -> str:
        deployment_id = deployment_id or uuid.uuid4().hex[:12]
        self._writer.put_rows(
            "INSERT OR REPLACE INTO deployments (id, node, engine_kind, image, launch_config_json, "
            "gpus_json, started_at, simulated) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            [
                (
                    deployment_id,
                    node,
                    engine_kind,
                    image,
                    dumps(launch_config or {}),
                    dumps(list(gpus) if gpus is not None else None),
                    time.time() if started_at is None else started_at,
                    int(simulated),
                )
            ],
        )
        return deployment_id
