"""The fleet side of the store: engine deployments and telemetry.

A mixin of ``Store``: writes enqueue to the writer thread like every other
write; reads use the store's read connection.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
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
