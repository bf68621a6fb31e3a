"""A ``pynvml``-shaped object that plays a real NVML recording.

It stands in for the NVML library and nothing else: :class:`NvmlCollector`
runs unchanged on top of it, so replayed frames go through the same wrapper,
unit conversions and NotSupported handling as a real H200.  The recording
(``agents/data/h200-trace.json``, shipped for the demo; the tests read it too) holds a
10 Hz series through idle, allocation, a power-capped matmul, copies and
release.  Several replayed GPUs play the same series shifted in time.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pynvml


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


def _raise_recorded(value: Any) -> Any:
    """The recording stores a failed call as 'NVMLError:<class>:<text>': raise it again."""
    if isinstance(value, str) and value.startswith("NVMLError:"):
        cls_name = value.split(":")[1]
        raise getattr(pynvml, cls_name, pynvml.NVMLError_Unknown)()
    return value


class ReplayNvml:
    """Plays ``trace`` at its recorded rate from ``clock()``'s start, looping."""

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
    ) -> None:
        data = json.loads(Path(trace_path).read_text())
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

    # -- position in the recording ------------------------------------------
    def position(self, index: int) -> tuple[dict[str, Any], int]:
        """(sample, completed laps) for GPU ``index`` now."""
        step = int((self.clock() - self.t0) / self.period_s) + index * self.shift
        return self.trace[step % len(self.trace)], step // len(self.trace)

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
        sample, laps = self.position(h.index)
        # Looping must not make the counter run backwards.
        return int(sample["energy_mj"] + laps * self.lap_energy_mj)

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

    def nvmlDeviceGetComputeRunningProcesses(self, h: _Handle) -> list[Any]:
        # The recording counts processes but names none: report none rather than invent.
        return list(_raise_recorded(self.static["compute_processes"]))
