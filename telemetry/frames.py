"""The telemetry frame: one per node per interval, the same schema for every node kind
(docs/design.md, "Metric definitions").  Declared once here; the agent's wire protocol
(``agents.protocol``) sends these classes and the store (``store.samples``) derives its
telemetry columns from the fields marked ``stored()``.

A value a device or engine does not report is ``None`` on the wire (JSON ``null``) and
"n/a" on screen — never 0.  Field names are the wire names of protocol 1, so they stay.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from telemetry.fields import stored

PROTOCOL_VERSION = 1
"""The agent <-> control-plane protocol these frames belong to; bump on an incompatible
change (the client refuses a different major)."""


@dataclass(frozen=True, slots=True)
class GpuProcess:
    """One process holding a GPU context, as NVML's compute and graphics lists name it."""

    pid: int
    """In the agent's host PID namespace."""
    name: str | None
    mem_used_bytes: int | None
    """None where NVML says NVML_VALUE_NOT_AVAILABLE (no per-process accounting)."""
    engine: str | None = None
    """The id of the agent's deployment that owns the process (its container, or the
    engine's process and its descendants); None: no engine of this agent ("other")."""
    usage: str = "C"
    """Which NVML list holds it: C (compute), G (graphics) or C+G, as nvidia-smi says."""


@dataclass(frozen=True, slots=True)
class GpuSample:
    index: int = field(metadata=stored("gpu_index"))
    name: str
    uuid: str | None = None
    util_pct: float | None = field(default=None, metadata=stored())
    mem_util_pct: float | None = None
    mem_used_bytes: int | None = field(default=None, metadata=stored())
    mem_total_bytes: int | None = None
    power_w: float | None = field(default=None, metadata=stored())
    power_limit_w: float | None = None
    energy_j: float | None = field(default=None, metadata=stored())
    """Monotonic energy counter since driver load, joules."""
    temp_c: float | None = field(default=None, metadata=stored())
    sm_clock_mhz: float | None = field(default=None, metadata=stored())
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
    data_dir_used_bytes: int | None = None
    """The disk holding the agent's state (data) dir: used and total bytes.  Optional
    within protocol 1, like every field added after it."""
    data_dir_total_bytes: int | None = None


@dataclass(frozen=True, slots=True)
class EngineTelemetry:
    id: str = field(metadata=stored("engine_id"))
    kind: str = field(metadata=stored("engine_kind"))
    state: str
    """starting | loading | ready | stopping | stopped | crashed | unknown"""
    health: str
    """healthy | loading | unhealthy | dead | unknown"""
    simulated: bool = False
    url: str | None = None
    kv_cache_usage: float | None = field(default=None, metadata=stored())
    """Fraction of the KV cache in use, 0..1."""
    kv_cache_usage_is_estimate: bool = False
    requests_running: float | None = field(default=None, metadata=stored())
    requests_waiting: float | None = field(default=None, metadata=stored())
    prompt_tok_s: float | None = field(default=None, metadata=stored())
    generation_tok_s: float | None = field(default=None, metadata=stored())
    ttft_p50_s: float | None = field(default=None, metadata=stored())
    itl_p50_s: float | None = field(default=None, metadata=stored())
    preemptions_total: float | None = None
    prefix_cache_hit_rate: float | None = None
    """Share 0..1 of prompt tokens the prefix cache served since the engine started; None:
    no lookup yet, or none at all (prefix caching off)."""
    scrape_error: str | None = None
    """Why this engine's values are missing or partial this interval (no answer, a page
    too big, a payload its dialect refuses); None when the scrape worked or none was due.
    Optional within protocol 1 (see the note on the control-plane messages)."""
    exit_code: int | None = None
    """A crashed engine's exit code, where its runtime knows it (optional, protocol 1)."""
    last_log_line: str | None = None
    """The engine's newest log line the agent kept (a failed start, a crash)."""
    model: str | None = None
    """The model it serves as its start named it (a simulator: its profile); optional."""
    runtime: str | None = None
    """compose | process | sim (optional, protocol 1)."""
    gpu_ids: tuple[int, ...] = ()
    """The node's GPUs it was started on (none: CPU, a simulator, or an older agent)."""
    port: int | None = None
    """The node port its API listens on: two engines of one kind differ by it."""
    started_at: float | None = None
    """Epoch seconds on the node's clock when the agent started or adopted it (uptime is
    the frame's ``ts`` minus this: both on one clock)."""


@dataclass(frozen=True, slots=True)
class TelemetryFrame:
    """Its stored fields head every row the store keeps of its GPUs and engines."""

    node: str = field(metadata=stored())
    seq: int
    ts: float = field(metadata=stored())
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
    boot_id: str = ""
    """Identifies one run of the agent: ``seq`` starts again at 1 when this changes."""
