"""A ``pynvml``-shaped object that plays a real NVML recording.

It stands in for the NVML library and nothing else: :class:`NvmlCollector`
runs unchanged on top of it, so replayed frames go through the same wrapper,
unit conversions and NotSupported handling as a real H200.  The recording
(``agents/data/h200-trace.json``, shipped for the demo; the tests read it too) holds a
10 Hz series through idle, allocation, a power-capped matmul, copies and
release.  Several replayed GPUs play the same series shifted in time.

Given the load on each GPU (:attr:`ReplayNvml.load`, the agent wires it to its engines),
a GPU plays the part of the recording that matches it instead of the whole loop: no engine
on it, the idle phase (~78 W, nothing allocated); an engine holding it, the idle stretch
after the allocation (~122 W, 21 GB); an engine serving requests, the memory-bound copy
phase (99 % util, ~410 W: decoding reads the weights and KV cache every step). A demo fleet
whose engines idle then shows idle GPUs, not the power-capped matmul at 690 W. Its energy
counter is the integral of the power it shows.

The recording counts processes but lists none, so the process lists come from a
second file built from NVML's documented ``nvmlProcessInfo_v3_t`` structure
(``agents/data/h200-processes.json``, its ``about`` says so), or from one a caller
writes to put processes of its own (a real engine's PID) on the replayed GPUs.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum
from pathlib import Path
from typing import Any

import pynvml

from agents.config import bundled_processes


@dataclass(frozen=True, slots=True)
class _Memory:
    total: int
    free: int
    used: int


@dataclass(frozen=True, slots=True)
class _Util:
    gpu: int
    memory: int


@dataclass(frozen=True, slots=True)
class _Handle:
    index: int


@dataclass(frozen=True, slots=True)
class _ProcessInfo:
    """nvmlProcessInfo_v3_t as nvidia-ml-py returns it (usedGpuMemory None where NVML
    said NVML_VALUE_NOT_AVAILABLE)."""

    pid: int
    usedGpuMemory: int | None  # NVML's field names
    gpuInstanceId: int
    computeInstanceId: int


NO_INSTANCE = 2**32 - 1
"""gpuInstanceId / computeInstanceId of a process on a GPU without MIG."""


class ReplayProcesses:
    """The process lists of a JSON file ``{"about": ..., "gpus": [{"compute": [...],
    "graphics": [...]}, ...]}``, each entry an nvmlProcessInfo_v3_t's fields with NVML's
    raw values.  Replayed GPU ``i`` plays entry ``i`` modulo their count, as the GPUs play
    one recording.  The file is read again when it changes, so a caller can put a process
    on a GPU while the replay runs."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._stamp: tuple[int, int, int] | None = None
        self._gpus: list[dict[str, list[_ProcessInfo]]] = []
        self._load()

    def _load(self) -> None:
        try:
            st = self.path.stat()
            stamp = (st.st_ino, st.st_mtime_ns, st.st_size)  # a rewrite inside one tick too
            if stamp == self._stamp:
                return
            data = json.loads(self.path.read_text())
            gpus = [
                {kind: [_process(entry) for entry in gpu.get(kind, ())] for kind in _KINDS}
                for gpu in data.get("gpus", ())
            ]
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            if self._stamp is None:  # at start: the operator named a file that is no list
                raise ValueError(
                    f"{self.path}: not a replay process list ({exc!r}); see the format in "
                    "agents/data/h200-processes.json"
                ) from exc
            return  # broken while running: the last lists stand until it reads again
        self._gpus, self._stamp = gpus, stamp

    def of(self, index: int, kind: str) -> list[_ProcessInfo]:
        self._load()
        if not self._gpus:
            return []
        return list(self._gpus[index % len(self._gpus)][kind])


_KINDS = ("compute", "graphics")


def _process(entry: dict[str, Any]) -> _ProcessInfo:
    used = int(entry["usedGpuMemory"])
    return _ProcessInfo(
        pid=int(entry["pid"]),
        # nvidia-ml-py's own conversion of the sentinel
        usedGpuMemory=None if used == pynvml.NVML_VALUE_NOT_AVAILABLE_ulonglong.value else used,
        gpuInstanceId=int(entry.get("gpuInstanceId", NO_INSTANCE)),
        computeInstanceId=int(entry.get("computeInstanceId", NO_INSTANCE)),
    )


def _raise_recorded(value: Any) -> Any:
    """The recording stores a failed call as 'NVMLError:<class>:<text>': raise it again."""
    if isinstance(value, str) and value.startswith("NVMLError:"):
        cls_name = value.split(":")[1]
        raise getattr(pynvml, cls_name, pynvml.NVMLError_Unknown)()
    return value


class GpuLoad(IntEnum):
    """What a replayed GPU is doing, from the engines on it (``agents.replay_load``)."""

    EMPTY = 0
    """No engine on it."""
    HOLDING = 1
    """An engine holds it (its weights and KV cache allocated) and serves nothing."""
    BUSY = 2
    """An engine on it is running or queueing requests."""


def load_segments(trace: list[dict[str, Any]]) -> dict[GpuLoad, list[dict[str, Any]]] | None:
    """The samples of the recording that show each load, or None where the recording has
    not the phases that tell them (another trace given with --replay-trace): it then plays
    whole, as it was recorded."""

    def phase(name: str) -> list[dict[str, Any]]:
        return [s for s in trace if s.get("phase") == name]

    alloc = phase("alloc")
    allocated = max((s["mem"]["used"] for s in alloc), default=0)
    copy = phase("memcopy")
    busy_mw = sorted(s["power_mw"] for s in copy if s["util"]["gpu"] >= 90)
    median_mw = busy_mw[len(busy_mw) // 2] if busy_mw else 0
    segments = {
        GpuLoad.EMPTY: phase("idle"),
        GpuLoad.HOLDING: [s for s in alloc if s["mem"]["used"] == allocated],
        # The copy's steady part: its first samples still fall from the matmul's 690 W.
        GpuLoad.BUSY: [
            s
            for s in copy
            if s["util"]["gpu"] >= 90 and abs(s["power_mw"] - median_mw) <= 0.1 * median_mw
        ],
    }
    return segments if all(segments.values()) else None


class ReplayNvml:
    """Plays ``trace`` at its recorded rate from ``clock()``'s start, looping; with
    :attr:`load` set, each GPU plays the segment that matches its load."""

    # Constants and error classes are the real library's, so ``except`` clauses match.
    NVMLError = pynvml.NVMLError
    NVMLError_NotSupported = pynvml.NVMLError_NotSupported
    NVMLError_NoPermission = pynvml.NVMLError_NoPermission
    NVMLError_FunctionNotFound = pynvml.NVMLError_FunctionNotFound
    NVML_TEMPERATURE_GPU = pynvml.NVML_TEMPERATURE_GPU
    NVML_CLOCK_SM = pynvml.NVML_CLOCK_SM
    NVML_CLOCK_MEM = pynvml.NVML_CLOCK_MEM
    NVML_PCIE_UTIL_TX_BYTES = pynvml.NVML_PCIE_UTIL_TX_BYTES
    NVML_PCIE_UTIL_RX_BYTES = pynvml.NVML_PCIE_UTIL_RX_BYTES

    def __init__(
        self,
        trace_path: Path,
        *,
        gpus: int = 1,
        clock: Callable[[], float] = time.monotonic,
        shift_samples: int = 37,
        processes: Path | None = None,
    ) -> None:
        data = json.loads(Path(trace_path).read_text())
        self.processes = ReplayProcesses(processes or bundled_processes())
        self.static: dict[str, Any] = data["static"]
        self.trace: list[dict[str, Any]] = data["trace"]
        if not self.trace:
            raise ValueError(f"{trace_path}: the trace holds no samples")
        span = self.trace[-1]["t"] - self.trace[0]["t"]
        self.period_s = span / max(len(self.trace) - 1, 1)
        self.lap_energy_mj = self.trace[-1]["energy_mj"] - self.trace[0]["energy_mj"]
        self.gpus = gpus
        self.clock = clock
        self.shift = shift_samples
        self.t0 = clock()
        self.inited = False
        self.segments = load_segments(self.trace)
        self.load: Callable[[int], GpuLoad] | None = None
        """The load on GPU ``index`` now; None: play the recording whole."""
        self._energy: dict[int, tuple[float, float]] = {}
        """Per GPU, (clock, energy in mJ) when the counter was last read, under load."""

    # -- position in the recording ------------------------------------------
    def position(self, index: int) -> tuple[dict[str, Any], int]:
        """(sample, completed laps) for GPU ``index`` now."""
        step = int((self.clock() - self.t0) / self.period_s) + index * self.shift
        if self.load is not None and self.segments is not None:
            segment = self.segments[self.load(index)]
            return segment[step % len(segment)], step // len(segment)
        return self.trace[step % len(self.trace)], step // len(self.trace)

    def _energy_mj(self, index: int) -> int:
        if self.load is None or self.segments is None:
            sample, laps = self.position(index)
            # Looping must not make the counter run backwards.
            return int(sample["energy_mj"] + laps * self.lap_energy_mj)
        # Segments of the recording follow one another as the load changes: the
        # counter sums the power shown instead, so energy per token stays true to it.
        now = self.clock()
        start = (now, float(self.trace[0]["energy_mj"]))
        last_t, energy = self._energy.get(index, start)
        energy += self.position(index)[0]["power_mw"] * max(now - last_t, 0.0)
        self._energy[index] = (now, energy)
        return int(energy)

    def _now(self, handle: _Handle) -> dict[str, Any]:
        if not self.inited:
            raise pynvml.NVMLError_Uninitialized()
        return self.position(handle.index)[0]

    # -- the pynvml surface NvmlCollector uses --------------------------------
    def nvmlInit(self) -> None:
        self.inited = True

    def nvmlShutdown(self) -> None:
        self.inited = False

    def nvmlSystemGetDriverVersion(self) -> str:
        return str(self.static["driver_version"])

    def nvmlDeviceGetCount(self) -> int:
        return self.gpus

    def nvmlDeviceGetHandleByIndex(self, index: int) -> _Handle:
        if not 0 <= index < self.gpus:
            raise pynvml.NVMLError_InvalidArgument()
        return _Handle(index)

    def nvmlDeviceGetName(self, h: _Handle) -> str:
        return str(self.static["name"])

    def nvmlDeviceGetUUID(self, h: _Handle) -> str:
        base = str(self.static["uuid"])
        return base if h.index == 0 else f"{base[:-2]}{h.index:02x}"

    def nvmlDeviceGetMemoryInfo(self, h: _Handle) -> _Memory:
        mem = self._now(h)["mem"]
        return _Memory(total=mem["total"], free=mem["free"], used=mem["used"])

    def nvmlDeviceGetUtilizationRates(self, h: _Handle) -> _Util:
        util = self._now(h)["util"]
        return _Util(gpu=util["gpu"], memory=util["memory"])

    def nvmlDeviceGetPowerUsage(self, h: _Handle) -> int:
        return int(self._now(h)["power_mw"])

    def nvmlDeviceGetEnforcedPowerLimit(self, h: _Handle) -> int:
        return int(_raise_recorded(self.static["power_limit_mw"]))

    def nvmlDeviceGetTotalEnergyConsumption(self, h: _Handle) -> int:
        self._now(h)  # uninitialised NVML raises here as it would
        return self._energy_mj(h.index)

    def nvmlDeviceGetTemperature(self, h: _Handle, sensor: int) -> int:
        return int(self._now(h)["temp_c"])

    def nvmlDeviceGetClockInfo(self, h: _Handle, kind: int) -> int:
        sample = self._now(h)
        return int(sample["sm_mhz"] if kind == pynvml.NVML_CLOCK_SM else sample["mem_mhz"])

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: _Handle) -> int:
        return int(self._now(h)["throttle"])

    def nvmlDeviceGetFanSpeed(self, h: _Handle) -> int:
        return int(_raise_recorded(self.static["fan_speed"]))

    def nvmlDeviceGetPcieThroughput(self, h: _Handle, counter: int) -> int:
        # Recorded once (static), not in the 10 Hz series.
        key = "pcie_tx_kbs" if counter == pynvml.NVML_PCIE_UTIL_TX_BYTES else "pcie_rx_kbs"
        return int(_raise_recorded(self.static[key]))

    def nvmlDeviceGetComputeRunningProcesses(self, h: _Handle) -> list[_ProcessInfo]:
        self._now(h)  # uninitialised NVML raises here as it would
        return self.processes.of(h.index, "compute")

    def nvmlDeviceGetGraphicsRunningProcesses(self, h: _Handle) -> list[_ProcessInfo]:
        self._now(h)
        return self.processes.of(h.index, "graphics")
