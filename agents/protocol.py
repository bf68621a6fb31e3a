"""The agent <-> control-plane wire protocol (versioned), shared by
``agents.server`` and ``agents.client``.

One telemetry frame per node per interval, the same schema for every node
kind (DESIGN.md, "Telemetry").  A value a device or engine does not report is
``None`` on the wire (JSON ``null``) and "n/a" on screen — never 0.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

PROTOCOL_VERSION = 1
"""Bump on an incompatible change; the client refuses a different major."""


@dataclass(frozen=True, slots=True)
class GpuProcess:
    pid: int
    name: str | None
    mem_used_bytes: int | None


@dataclass(frozen=True, slots=True)
class GpuSample:
    index: int
    name: str
    uuid: str | None = None
    util_pct: float | None = None
    mem_util_pct: float | None = None
    mem_used_bytes: int | None = None
    mem_total_bytes: int | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    energy_j: float | None = None
    """Monotonic energy counter since driver load, joules."""
    temp_c: float | None = None
    sm_clock_mhz: float | None = None
    mem_clock_mhz: float | None = None
    throttle_reasons: int | None = None
    """NVML clocks-event-reasons bitmask (bit 4 / 0x4... see agents.collectors.nvml)."""
    pcie_rx_bytes_s: float | None = None
    pcie_tx_bytes_s: float | None = None
    fan_pct: float | None = None
    processes: tuple[GpuProcess, ...] = ()


@dataclass(frozen=True, slots=True)
class HostSample:
    cpu_pct: float | None = None
    ram_used_bytes: int | None = None
    ram_total_bytes: int | None = None
    load1: float | None = None
    load5: float | None = None
    load15: float | None = None


@dataclass(frozen=True, slots=True)
class EngineTelemetry:
    id: str
    kind: str
    state: str
    """starting | loading | ready | stopping | stopped | crashed | unknown"""
    health: str
    """healthy | loading | unhealthy | dead | unknown"""
    simulated: bool = False
    url: str | None = None
    kv_cache_usage: float | None = None
    kv_cache_usage_is_estimate: bool = False
    requests_running: float | None = None
    requests_waiting: float | None = None
    prompt_tok_s: float | None = None
    generation_tok_s: float | None = None
    ttft_p50_s: float | None = None
    itl_p50_s: float | None = None
    preemptions_total: float | None = None
    prefix_cache_hit_rate: float | None = None


@dataclass(frozen=True, slots=True)
class TelemetryFrame:
    node: str
    seq: int
    ts: float
    """Unix epoch seconds when the frame was sampled."""
    host: HostSample
    gpus: tuple[GpuSample, ...] = ()
    engines: tuple[EngineTelemetry, ...] = ()
    platform: str = "linux"
    """nvidia | jetson | linux (no accelerator) | replay"""
    unified_memory: bool = False
    simulated: bool = False
    """True when GPU values are replayed from a recording, not measured."""
    protocol: int = PROTOCOL_VERSION
    extra: dict[str, Any] = field(default_factory=dict)
