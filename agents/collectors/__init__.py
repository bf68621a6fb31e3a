"""Collectors as a library: each turns a device (NVML, Jetson, the host, engines)
into protocol samples.  The server only schedules them."""

from __future__ import annotations

from typing import Protocol

from agents.protocol import GpuInfo
from telemetry import GpuSample


class GpuCollector(Protocol):
    """What the sampler needs from a GPU source, real or replayed."""

    platform: str
    unified_memory: bool
    simulated: bool

    def open(self) -> tuple[GpuInfo, ...]: ...

    def sample(self) -> tuple[GpuSample, ...]: ...

    def slow_sample(self) -> None:
        """Readings too slow for the hot path (PCIe throughput: ~20 ms per GPU)."""

    def close(self) -> None: ...

    @property
    def driver_version(self) -> str | None: ...
