"""The fleet side of the store: nodes, engine deployments, events, telemetry.

A mixin of ``Store``: writes enqueue to the writer thread like every other
write; reads use the store's read connection.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from store.energy import INVALIDATE_SQL, SETTLE_S
from store.samples import SAMPLE_TABLES
from store.writer import Writer
from telemetry import TelemetryFrame


def dumps(value: Mapping[str, Any] | Sequence[Any] | None) -> str | None:
    return None if value is None else json.dumps(value, sort_keys=True, default=str)


@dataclass(frozen=True, slots=True)
class NodeInfo:
    name: str
    platform: str | None
    address: str | None
    gpus: list[str] | None
    unified_memory: bool
    first_seen: float
    last_seen: float


@dataclass(frozen=True, slots=True)
class DeploymentInfo:
    deployment_id: str
    node: str
    engine_kind: str
    image: str | None
    launch_config: dict[str, Any]
    gpus: list[int] | None
    started_at: float
    stopped_at: float | None
    simulated: bool


@dataclass(frozen=True, slots=True)
class EventInfo:
    ts: float
    node: str
    kind: str
    deployment_id: str | None
    message: str | None


@dataclass(frozen=True, slots=True)
class GpuPoint:
    """One point of a GPU's history: a raw sample, or a per-minute mean."""

    ts: float
    util_pct: float | None
    power_w: float | None
    samples: int
    """1 for a raw sample; how many samples a per-minute history point averages."""


class FleetMixin:
    _writer: Writer
    _read: Callable[..., Any]
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

    def add_event(
        self,
        node: str,
        kind: str,
        deployment_id: str | None = None,
        message: str | None = None,
        ts: float | None = None,
    ) -> None:
        """kind: start | healthy | crash | swap | stop | ... (free text, short)."""
        self._writer.put_rows(
            "INSERT INTO events (ts, node, kind, deployment_id, message) VALUES (?, ?, ?, ?, ?)",
            [(time.time() if ts is None else ts, node, kind, deployment_id, message)],
        )

    def upsert_node(
        self,
        name: str,
        *,
        platform: str | None = None,
        address: str | None = None,
        gpus: Sequence[str] | None = None,
        unified_memory: bool = False,
        seen_at: float | None = None,
    ) -> None:
        ts = time.time() if seen_at is None else seen_at
        self._writer.put_rows(
            "INSERT INTO nodes (name, platform, address, gpus_json, unified_memory, first_seen, "
            "last_seen) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (name) DO UPDATE SET "
            "platform = coalesce(excluded.platform, platform), "
            "address = coalesce(excluded.address, address), "
            "gpus_json = coalesce(excluded.gpus_json, gpus_json), "
            "unified_memory = excluded.unified_memory, last_seen = excluded.last_seen",
            [(name, platform, address, dumps(gpus), int(unified_memory), ts, ts)],
        )

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

    def stop_deployment(self, deployment_id: str, at: float | None = None) -> None:
        self._writer.put_rows(
            "UPDATE deployments SET stopped_at = ? WHERE id = ?",
            [(time.time() if at is None else at, deployment_id)],
        )

    # --- reads -------------------------------------------------------------

    def nodes(self) -> list[NodeInfo]:
        rows = self._read(
            lambda c: c.execute(
                "SELECT name, platform, address, gpus_json, unified_memory, first_seen, last_seen "
                "FROM nodes ORDER BY name"
            ).fetchall()
        )
        return [
            NodeInfo(r[0], r[1], r[2], None if r[3] is None else json.loads(r[3]), bool(r[4]),
                     r[5], r[6])
            for r in rows
        ]  # fmt: skip

    def deployments(self, node: str | None = None) -> list[DeploymentInfo]:
        sql = (
            "SELECT id, node, engine_kind, image, launch_config_json, gpus_json, started_at, "
            "stopped_at, simulated FROM deployments"
        )
        params: tuple[Any, ...] = ()
        if node is not None:
            sql, params = sql + " WHERE node = ?", (node,)
        rows = self._read(lambda c: c.execute(sql + " ORDER BY started_at", params).fetchall())
        return [
            DeploymentInfo(r[0], r[1], r[2], r[3], json.loads(r[4] or "{}"),
                           None if r[5] is None else json.loads(r[5]), r[6], r[7], bool(r[8]))
            for r in rows
        ]  # fmt: skip

    def events(
        self, node: str | None = None, since: float | None = None, limit: int = 200
    ) -> list[EventInfo]:
        """Newest first."""
        where: list[str] = []
        params: list[Any] = []
        if node is not None:
            where.append("node = ?")
            params.append(node)
        if since is not None:
            where.append("ts >= ?")
            params.append(since)
        sql = "SELECT ts, node, kind, deployment_id, message FROM events"
        sql += (" WHERE " + " AND ".join(where) if where else "") + " ORDER BY ts DESC LIMIT ?"
        rows = self._read(lambda c: c.execute(sql, (*params, int(limit))).fetchall())
        return [EventInfo(*r) for r in rows]

    def gpu_series(self, node: str, gpu_index: int, start: float, end: float) -> list[GpuPoint]:
        """A GPU's history over [start, end]: raw samples where they are kept,
        per-minute means where retention folded them, in time order."""
        rows = self._read(
            lambda c: c.execute(
                "SELECT ts, util_pct, power_w, 1 FROM gpu_samples "
                "WHERE node = ? AND gpu_index = ? AND ts BETWEEN ? AND ? "
                "UNION ALL SELECT bucket_ts, util_pct_mean, power_w_mean, samples FROM gpu_history "
                "WHERE node = ? AND gpu_index = ? AND bucket_ts BETWEEN ? AND ? ORDER BY 1",
                (node, gpu_index, start, end) * 2,
            ).fetchall()
        )
        return [GpuPoint(*r) for r in rows]
