"""The host: CPU, RAM and load through psutil; the disk of the agent's data dir."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import psutil

from telemetry import HostSample


class HostCollector:
    def __init__(self, data_dir: Path | None = None) -> None:
        self.data_dir = data_dir
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
            **self._disk(),
        )

    def _disk(self) -> dict[str, int]:
        if self.data_dir is None:
            return {}
        try:
            usage = shutil.disk_usage(self.data_dir)
        except OSError:  # not there (yet): n/a, never a guess
            return {}
        return {"data_dir_used_bytes": usage.used, "data_dir_total_bytes": usage.total}
