"""The 1 Hz sampling loop: GPUs, host and engines into sequence-numbered frames,
kept in a ring buffer so a client that reconnects resumes where it left off."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace

from agents.broadcast import Broadcast
from agents.collectors import GpuCollector
from agents.collectors.host import HostCollector
from telemetry import EngineTelemetry, GpuSample, HostSample, TelemetryFrame

log = logging.getLogger(__name__)

EngineSource = Callable[[], Awaitable[tuple[EngineTelemetry, ...]]]
PidOwner = Callable[[int], str | None]
"""The deployment that owns a GPU process's PID (``agents.runtime.owners.pid_owner``)."""
SLOW_EVERY = 5
"""Slow readings (PCIe) every this many frames."""


async def _no_engines() -> tuple[EngineTelemetry, ...]:
    return ()


def _attributed(gpu: GpuSample, owner: PidOwner) -> GpuSample:
    if not gpu.processes:
        return gpu
    procs = tuple(replace(p, engine=owner(p.pid)) for p in gpu.processes)
    return replace(gpu, processes=procs)


class Sampler:
    def __init__(
        self,
        node: str,
        gpu: GpuCollector | None,
        *,
        host: HostCollector | None = None,
        engines: EngineSource = _no_engines,
        interval_s: float = 1.0,
        buffer: int = 600,
        platform: str = "linux",
        boot_id: str = "",
        owner: PidOwner | None = None,
    ) -> None:
        self.node = node
        self.owner = owner
        self.gpu = gpu
        self.host = host or HostCollector()
        self.engines = engines
        self.interval_s = interval_s
        self.platform = gpu.platform if gpu else platform
        self.boot_id = boot_id
        self.frames: Broadcast[TelemetryFrame] = Broadcast(buffer, boot_id=boot_id)
        self.seq = 0
        self.sample_cost_s: deque[float] = deque(maxlen=120)
        """Seconds of work per frame (the benchmark reads it)."""

    @property
    def latest(self) -> TelemetryFrame | None:
        return self.frames.latest

    def _read_devices(self, slow: bool) -> tuple[tuple[GpuSample, ...], HostSample]:
        gpus: tuple[GpuSample, ...] = ()
        if self.gpu is not None:
            if slow:
                self.gpu.slow_sample()
            gpus = self.gpu.sample()
            if self.owner is not None:
                gpus = tuple(_attributed(gpu, self.owner) for gpu in gpus)
        return gpus, self.host.sample()

    async def sample_once(self) -> TelemetryFrame:
        started = time.perf_counter()
        ts = time.time()
        # One thread hop per frame for every device read: NVML calls block for ms.
        devices = asyncio.to_thread(self._read_devices, self.seq % SLOW_EVERY == 0)
        (gpus, host), engines = await asyncio.gather(devices, self._engines_safely())
        self.seq += 1
        extra = {}
        rails = getattr(self.gpu, "rails_w", None)
        if callable(rails):
            extra["rails_w"] = rails()
        frame = TelemetryFrame(
            node=self.node,
            seq=self.seq,
            ts=ts,
            host=host,
            gpus=gpus,
            engines=engines,
            platform=self.platform,
            unified_memory=bool(self.gpu and self.gpu.unified_memory),
            simulated=bool(self.gpu and self.gpu.simulated),
            extra=extra,
            boot_id=self.boot_id,
        )
        self.sample_cost_s.append(time.perf_counter() - started)
        self.frames.publish(frame)
        return frame

    async def _engines_safely(self) -> tuple[EngineTelemetry, ...]:
        try:
            return await self.engines()
        except Exception:  # an engine scrape must never stop GPU telemetry
            log.exception("engine scrape failed")
            return ()

    async def run(self) -> None:
        """Sample on a fixed grid (no drift) until cancelled."""
        loop = asyncio.get_running_loop()
        next_at = loop.time() + (self.interval_s if self.seq else 0.0)
        if self.seq:
            await asyncio.sleep(self.interval_s)
        while True:
            try:
                await self.sample_once()
            except Exception:
                log.exception("sampling failed; retrying next interval")
            next_at += self.interval_s
            delay = next_at - loop.time()
            if delay < 0:  # fell behind: skip the missed ticks
                next_at = loop.time()
                delay = 0
            await asyncio.sleep(delay)

    def subscribe(
        self, since_seq: int | None = None, boot_id: str | None = None
    ) -> AsyncIterator[TelemetryFrame]:
        return self.frames.subscribe(since_seq, latest_only=True, boot_id=boot_id)
