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
from typing import Any, Protocol

from store.energy import INVALIDATE_SQL, SETTLE_S
from store.models import EngineRow, GpuRow, TelemetryRow
from store.writer import Writer

_INSERT_GPU = (
    "INSERT INTO gpu_samples (node, ts, gpu_index, util_pct, mem_used_bytes, power_w, energy_j, "
    "temp_c, sm_clock_mhz) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_INSERT_ENGINE = (
    "INSERT INTO engine_samples (node, ts, engine_id, engine_kind, kv_cache_usage, "
    "requests_running, requests_waiting, prompt_tok_s, generation_tok_s, ttft_p50_s, itl_p50_s) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)


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


class GpuLike(Protocol):
    @property
    def index(self) -> int: ...
    @property
    def util_pct(self) -> float | None: ...
    @property
    def mem_used_bytes(self) -> int | None: ...
    @property
    def power_w(self) -> float | None: ...
    @property
    def energy_j(self) -> float | None: ...
    @property
    def temp_c(self) -> float | None: ...
    @property
    def sm_clock_mhz(self) -> float | None: ...


class EngineLike(Protocol):
    @property
    def id(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def kv_cache_usage(self) -> float | None: ...
    @property
    def requests_running(self) -> float | None: ...
    @property
    def requests_waiting(self) -> float | None: ...
    @property
    def prompt_tok_s(self) -> float | None: ...
    @property
    def generation_tok_s(self) -> float | None: ...
    @property
    def ttft_p50_s(self) -> float | None: ...
    @property
    def itl_p50_s(self) -> float | None: ...


class FrameLike(Protocol):
    """The fields of ``agents.protocol.TelemetryFrame`` the store keeps (the
    store may not import the agent package, so it names them structurally)."""

    @property
    def node(self) -> str: ...
    @property
    def ts(self) -> float: ...
    @property
    def gpus(self) -> Sequence[GpuLike]: ...
    @property
    def engines(self) -> Sequence[EngineLike]: ...


def rows_from_frame(frame: FrameLike) -> list[TelemetryRow]:
    """A telemetry frame as the rows ``add_telemetry`` takes."""
    rows: list[TelemetryRow] = [
        GpuRow(frame.node, frame.ts, g.index, g.util_pct, g.mem_used_bytes, g.power_w,
               g.energy_j, g.temp_c, g.sm_clock_mhz)
        for g in frame.gpus
    ]  # fmt: skip
    rows += [
        EngineRow(frame.node, frame.ts, e.id, e.kind, e.kv_cache_usage, e.requests_running,
                  e.requests_waiting, e.prompt_tok_s, e.generation_tok_s, e.ttft_p50_s,
                  e.itl_p50_s)
        for e in frame.engines
    ]  # fmt: skip
    return rows


class FleetMixin:
    _writer: Writer
    _read: Callable[..., Any]
    _maybe_prune: Callable[[], None]

    def add_telemetry(self, rows: Iterable[TelemetryRow]) -> None:
        gpu: list[tuple[Any, ...]] = []
        engine: list[tuple[Any, ...]] = []
        late_before = time.time() - SETTLE_S
        late: dict[str, tuple[float, float]] = {}  # node -> ts range of late GPU samples
        for r in rows:
            if isinstance(r, GpuRow):
                if r.ts < late_before:
                    lo, hi = late.get(r.node, (r.ts, r.ts))
                    late[r.node] = (min(lo, r.ts), max(hi, r.ts))
                gpu.append(
                    (r.node, r.ts, r.gpu_index, r.util_pct, r.mem_used_bytes, r.power_w,
                     r.energy_j, r.temp_c, r.sm_clock_mhz)
                )  # fmt: skip
            elif isinstance(r, EngineRow):
                engine.append(
                    (r.node, r.ts, r.engine_id, r.engine_kind, r.kv_cache_usage,
                     r.requests_running, r.requests_waiting, r.prompt_tok_s,
                     r.generation_tok_s, r.ttft_p50_s, r.itl_p50_s)
                )  # fmt: skip
            else:
                raise TypeError(f"add_telemetry takes GpuRow / EngineRow, not {type(r).__name__}")
        if gpu:
            self._writer.put_rows(_INSERT_GPU, gpu)
        if engine:
            self._writer.put_rows(_INSERT_ENGINE, engine)
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
