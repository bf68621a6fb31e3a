"""Jetson boards: jtop's socket when jetson-stats runs, else ``tegrastats``
lines, else sysfs.  Frames carry the same fields as NVIDIA ones with
``unified_memory: true``: GPU memory is the shared RAM, utilisation is GR3D's
load, power comes from the INA3221 rails.

``tegrastats`` forms handled (real lines in tests/fixtures/jetson/):
JetPack 6 ``GR3D_FREQ 10%@1300``, JetPack 7 ``GR3D_FREQ 12%@[1300,1300]`` (one
clock per GPC), and Thor's ``GR3D_FREQ @[1000,1000,1000]`` (clocks, no load).
"""

from __future__ import annotations

import logging
import re
import shutil
import subprocess
import threading
from dataclasses import dataclass, field
from pathlib import Path

from agents.protocol import GpuInfo
from telemetry import GpuSample

log = logging.getLogger(__name__)

JTOP_SOCKET = Path("/run/jtop.sock")
MIB = 1024 * 1024

_RAM = re.compile(r"\bRAM (\d+)/(\d+)MB")
_CPU = re.compile(r"\bCPU \[([^\]]*)\]")
_GR3D = re.compile(r"\bGR3D_FREQ (?:(\d+)%)?@(?:\[([\d,]+)\]|(\d+))")
_EMC = re.compile(r"\bEMC_FREQ (\d+)%(?:@(\d+))?")
_TEMP = re.compile(r"\b(\w+)@(-?[\d.]+)C(?:/(-?[\d.]+)C)?")
_RAIL = re.compile(r"\b([A-Z][A-Z0-9_]+) (\d+)mW/(\d+)mW(?:/(\d+)mW)?")
_BOARD_INPUT = ("VDD_IN", "POM_5V_IN", "5V_IN")


@dataclass(frozen=True, slots=True)
class TegraReading:
    """One tegrastats line, in SI units; None where the line does not say."""

    ram_used_bytes: int | None = None
    ram_total_bytes: int | None = None
    cpu_pct: float | None = None
    gpu_util_pct: float | None = None
    gpu_clock_mhz: float | None = None
    emc_util_pct: float | None = None
    emc_clock_mhz: float | None = None
    temps_c: dict[str, float] = field(default_factory=dict)
    rails_w: dict[str, float] = field(default_factory=dict)
    """Instantaneous power per rail, watts."""

    @property
    def power_w(self) -> float | None:
        """Board input (VDD_IN) where the board has that rail, else the sum of the rails
        (on AGX Orin they are parallel branches of the input)."""
        for name in _BOARD_INPUT:
            if name in self.rails_w:
                return self.rails_w[name]
        return sum(self.rails_w.values()) if self.rails_w else None

    @property
    def gpu_temp_c(self) -> float | None:
        for name in ("gpu", "GPU"):
            if name in self.temps_c:
                return self.temps_c[name]
        return None


def parse_tegrastats(line: str) -> TegraReading:
    """Parse one tegrastats line; raises ValueError when it is not one."""
    ram = _RAM.search(line)
    gr3d = _GR3D.search(line)
    if ram is None and gr3d is None:
        raise ValueError(f"not a tegrastats line: {line[:80]!r}")
    cpu_pct = None
    if (cpu := _CPU.search(line)) is not None:
        loads = [float(c.split("%")[0]) for c in cpu.group(1).split(",") if "%" in c]
        cpu_pct = sum(loads) / len(loads) if loads else None
    util = clock = None
    if gr3d is not None:
        util = float(gr3d.group(1)) if gr3d.group(1) else None
        clocks = [float(c) for c in (gr3d.group(2) or gr3d.group(3)).split(",")]
        clock = max(clocks)
    emc = _EMC.search(line)
    return TegraReading(
        ram_used_bytes=int(ram.group(1)) * MIB if ram else None,
        ram_total_bytes=int(ram.group(2)) * MIB if ram else None,
        cpu_pct=cpu_pct,
        gpu_util_pct=util,
        gpu_clock_mhz=clock,
        emc_util_pct=float(emc.group(1)) if emc else None,
        emc_clock_mhz=float(emc.group(2)) if emc and emc.group(2) else None,
        temps_c={m.group(1): float(m.group(2)) for m in _TEMP.finditer(line)},
        rails_w={m.group(1): int(m.group(2)) / 1000 for m in _RAIL.finditer(line)},
    )


def reading_to_gpu(reading: TegraReading, name: str = "Jetson GPU") -> GpuSample:
    return GpuSample(
        index=0,
        name=name,
        util_pct=reading.gpu_util_pct,
        mem_util_pct=reading.emc_util_pct,
        mem_used_bytes=reading.ram_used_bytes,
        mem_total_bytes=reading.ram_total_bytes,
        power_w=reading.power_w,
        temp_c=reading.gpu_temp_c,
        sm_clock_mhz=reading.gpu_clock_mhz,
        mem_clock_mhz=reading.emc_clock_mhz,
    )


def board_name() -> str:
    try:
        return Path("/proc/device-tree/model").read_text().strip("\x00\n ") or "Jetson"
    except OSError:
        return "Jetson"


class TegrastatsCollector:
    """Runs ``tegrastats --interval`` and keeps its latest line."""

    platform = "jetson"
    unified_memory = True
    simulated = False
    driver_version: str | None = None

    def __init__(self, interval_s: float = 1.0, binary: str = "tegrastats") -> None:
        self.interval_ms = max(int(interval_s * 1000), 100)
        self.binary = binary
        self.name = board_name()
        self._latest = TegraReading()
        self._proc: subprocess.Popen[str] | None = None
        self._thread: threading.Thread | None = None

    def open(self) -> tuple[GpuInfo, ...]:
        self._proc = subprocess.Popen(
            [self.binary, "--interval", str(self.interval_ms)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        self._thread = threading.Thread(target=self._read, daemon=True, name="tegrastats")
        self._thread.start()
        return (GpuInfo(index=0, name=self.name),)

    def _read(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        for line in self._proc.stdout:
            try:
                self._latest = parse_tegrastats(line)
            except ValueError:
                log.debug("unparsed tegrastats line: %r", line)

    def sample(self) -> tuple[GpuSample, ...]:
        return (reading_to_gpu(self._latest, self.name),)

    def slow_sample(self) -> None:
        return None

    def rails_w(self) -> dict[str, float]:
        return dict(self._latest.rails_w)

    def close(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            self._proc.wait(timeout=5)


class SysfsCollector:
    """Last resort without tegrastats: GR3D load and RAM only."""

    platform = "jetson"
    unified_memory = True
    simulated = False
    driver_version: str | None = None
    LOAD_FILES = (Path("/sys/devices/platform/gpu.0/load"), Path("/sys/devices/gpu.0/load"))

    def open(self) -> tuple[GpuInfo, ...]:
        return (GpuInfo(index=0, name=board_name()),)

    def sample(self) -> tuple[GpuSample, ...]:
        import psutil

        util = None
        for path in self.LOAD_FILES:
            try:
                util = int(path.read_text()) / 10  # per mille
                break
            except (OSError, ValueError):
                continue
        mem = psutil.virtual_memory()
        return (
            GpuSample(
                index=0,
                name=board_name(),
                util_pct=util,
                mem_used_bytes=int(mem.total - mem.available),
                mem_total_bytes=int(mem.total),
            ),
        )

    def slow_sample(self) -> None:
        return None

    def close(self) -> None:
        return None


def has_tegrastats() -> bool:
    return shutil.which("tegrastats") is not None


def is_jetson() -> bool:
    return Path("/etc/nv_tegra_release").exists() or shutil.which("tegrastats") is not None
