"""The host: CPU, RAM and load through psutil."""

from __future__ import annotations

import os

import psutil

from telemetry import HostSample


class HostCollector:
    def __init__(self) -> None:
        # The first cpu_percent(None) call only sets the baseline.
        psutil.cpu_percent(interval=None)

    def sample(self) -> HostSample:
        mem = psutil.virtual_memory()
        try:
            load1, load5, load15 = os.getloadavg()
        except OSError:
            load1 = load5 = load15 = float("nan")
        return HostSample(
            cpu_pct=psutil.cpu_percent(interval=None),
            ram_used_bytes=int(mem.total - mem.available),
            ram_total_bytes=int(mem.total),
            load1=load1,
            load5=load5,
            load15=load15,
        )
