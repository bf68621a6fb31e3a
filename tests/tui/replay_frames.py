"""Frames of a replayed fleet, made in-process from the real H200 NVML recording.

The agent's replay collector (``agents.collectors.replay.ReplayNvml`` under the
real ``NvmlCollector``) produces the GPU samples, driven by a clock this module
controls: a snapshot test asks for the frame at a fixed position and always
gets the same one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from agents.collectors.nvml import NvmlCollector
from agents.collectors.replay import ReplayNvml
from agents.config import bundled_trace
from telemetry import EngineTelemetry, GpuSample, HostSample, TelemetryFrame

GIB = 2**30


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class ReplayNode:
    """One replayed node: ``frame(t)`` is its frame ``t`` seconds into the recording."""

    def __init__(
        self,
        name: str,
        gpus: int = 1,
        *,
        trace: Path | None = None,
        shift_samples: int = 37,
        epoch: float = 1_796_048_940.0,
        processes: Path | None = None,
        owners: Mapping[int, str] | None = None,
    ) -> None:
        self.name = name
        self.epoch = epoch
        self._clock = _Clock()
        self._owners = owners or {}
        """PID -> deployment, as the node's agent would attribute the replayed processes."""
        lib = ReplayNvml(
            trace or bundled_trace(),
            gpus=gpus,
            clock=self._clock,
            shift_samples=shift_samples,
            processes=processes,
        )
        self._collector = NvmlCollector(lib, simulated=True)
        self._collector.open()
        self._seq = 0

    def frame(self, t: float, engines: Sequence[EngineTelemetry] = ()) -> TelemetryFrame:
        self._clock.now = t
        self._seq += 1
        return TelemetryFrame(
            node=self.name,
            seq=self._seq,
            ts=self.epoch + t,
            host=HostSample(
                cpu_pct=12.5, ram_used_bytes=96 * GIB, ram_total_bytes=2048 * GIB, load1=3.2
            ),
            gpus=tuple(self._attributed(gpu) for gpu in self._collector.sample()),
            engines=tuple(engines),
            platform="replay",
            simulated=True,
        )

    def _attributed(self, gpu: GpuSample) -> GpuSample:
        procs = (replace(p, engine=self._owners.get(p.pid)) for p in gpu.processes)
        return replace(gpu, processes=tuple(procs))

    def history(
        self, seconds: Sequence[float], engines: Sequence[EngineTelemetry] = ()
    ) -> list[TelemetryFrame]:
        return [self.frame(t, engines) for t in seconds]
