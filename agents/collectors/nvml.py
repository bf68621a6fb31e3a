"""NVIDIA GPUs through NVML (nvidia-ml-py), nvitop-style.

Every NVML call goes through :class:`NvmlQuery`: a call the device does not
support (NotSupported, NoPermission, FunctionNotFound) is found once when the
collector opens and is then never made again, so the 1 Hz hot path only pays for
calls that answer.  PCIe throughput takes ~20 ms per GPU on an H200
(``call_timing_us`` in the recording), so it is read by :meth:`slow_sample` off
the hot path and its last value is reused.

The same code runs on a real GPU and on :mod:`agents.collectors.replay`, a
``pynvml``-shaped object playing a recording: the stand-in sits at the library
boundary only.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import psutil

from agents.protocol import GpuInfo
from telemetry import GpuProcess, GpuSample

log = logging.getLogger(__name__)

NVML_CLOCKS_EVENT_SW_POWER_CAP = 0x4
"""Throttle-reason bit set while the GPU is held at its power limit."""

NVML_VALUE_NOT_AVAILABLE = 2**64 - 1
"""usedGpuMemory where the driver keeps no per-process account (nvidia-ml-py turns it into
None; older releases hand the raw unsigned -1 through)."""
_PROCESS_LISTS = (
    ("nvmlDeviceGetComputeRunningProcesses", "C"),
    ("nvmlDeviceGetGraphicsRunningProcesses", "G"),
)

# Failures that mean "this device will never answer this call".
_PERMANENT = ("NVMLError_NotSupported", "NVMLError_NoPermission", "NVMLError_FunctionNotFound")


class NvmlQuery:
    """The one wrapper every NVML call goes through; None where there is no answer."""

    def __init__(self, lib: Any) -> None:
        self.lib = lib
        self.disabled: set[tuple[Any, ...]] = set()
        permanent = tuple(getattr(lib, name) for name in _PERMANENT if hasattr(lib, name))
        self._permanent: tuple[type[BaseException], ...] = permanent
        self._error: type[BaseException] = lib.NVMLError

    def __call__(self, fn: str, index: int, *args: Any) -> Any:
        # args[0] is the device handle; the rest (clock / sensor kind) tell calls apart.
        key = (fn, index, *args[1:])
        if key in self.disabled:
            return None
        try:
            return getattr(self.lib, fn)(*args)
        except self._permanent:
            self.disabled.add(key)
            log.info("NVML %s not supported on GPU %d: disabled", fn, index)
            return None
        except AttributeError:  # an older nvidia-ml-py without this function
            self.disabled.add(key)
            return None
        except self._error as exc:  # transient (GPU busy, lost): this reading is n/a
            log.debug("NVML %s on GPU %d failed: %s", fn, index, exc)
            return None


def _text(value: Any) -> str | None:
    if value is None:
        return None
    return value.decode() if isinstance(value, bytes) else str(value)


def _used_memory(value: Any) -> int | None:
    return None if value is None or int(value) == NVML_VALUE_NOT_AVAILABLE else int(value)


def _div(value: Any, by: float) -> float | None:
    return None if value is None else float(value) / by


class NvmlCollector:
    platform = "nvidia"
    unified_memory = False

    def __init__(self, lib: Any = None, *, simulated: bool = False) -> None:
        if lib is None:
            import pynvml

            lib = pynvml
        self.query = NvmlQuery(lib)
        self.simulated = simulated
        self._handles: list[Any] = []
        self._info: tuple[GpuInfo, ...] = ()
        self._pcie: dict[int, tuple[float | None, float | None]] = {}
        self._driver: str | None = None
        self._proc_names: dict[int, str | None] = {}

    @property
    def driver_version(self) -> str | None:
        return self._driver

    def open(self) -> tuple[GpuInfo, ...]:
        lib = self.query.lib
        lib.nvmlInit()
        self._driver = _text(self.query("nvmlSystemGetDriverVersion", -1))
        count = int(lib.nvmlDeviceGetCount())
        self._handles = [lib.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        infos = []
        for i, h in enumerate(self._handles):
            mem = self.query("nvmlDeviceGetMemoryInfo", i, h)
            infos.append(
                GpuInfo(
                    index=i,
                    name=_text(self.query("nvmlDeviceGetName", i, h)) or f"GPU {i}",
                    uuid=_text(self.query("nvmlDeviceGetUUID", i, h)),
                    mem_total_bytes=None if mem is None else int(mem.total),
                    power_limit_w=_div(self.query("nvmlDeviceGetEnforcedPowerLimit", i, h), 1e3),
                )
            )
        self._info = tuple(infos)
        # Probe once: calls that fail permanently are disabled before the hot path runs.
        self.sample()
        self.slow_sample()
        return self._info

    def _throttle(self, i: int, h: Any) -> int | None:
        value = self.query("nvmlDeviceGetCurrentClocksEventReasons", i, h)
        if value is None:
            value = self.query("nvmlDeviceGetCurrentClocksThrottleReasons", i, h)
        return None if value is None else int(value)

    def _processes(self, i: int, h: Any) -> tuple[GpuProcess, ...]:
        """Compute and graphics contexts, one entry per PID (nvidia-smi's C, G, C+G)."""
        found: dict[int, GpuProcess] = {}
        for fn, kind in _PROCESS_LISTS:
            for p in self.query(fn, i, h) or ():
                pid = int(p.pid)
                used = _used_memory(getattr(p, "usedGpuMemory", None))
                usage = kind
                seen = found.get(pid)
                if seen is not None:  # in both lists: one context, the memory counted once
                    used = seen.mem_used_bytes if seen.mem_used_bytes is not None else used
                    usage = f"{seen.usage}+{kind}"
                found[pid] = GpuProcess(
                    pid=pid, name=self._proc_name(pid), mem_used_bytes=used, usage=usage
                )
        return tuple(found.values())

    def _proc_name(self, pid: int) -> str | None:
        if pid not in self._proc_names:
            try:
                self._proc_names[pid] = psutil.Process(pid).name()
            except (psutil.Error, ValueError):
                self._proc_names[pid] = None
        return self._proc_names[pid]

    def sample(self) -> tuple[GpuSample, ...]:
        """One batched read of every GPU (the 1 Hz hot path)."""
        lib, q = self.query.lib, self.query
        samples = []
        for info, h in zip(self._info, self._handles, strict=True):
            i = info.index
            util = q("nvmlDeviceGetUtilizationRates", i, h)
            mem = q("nvmlDeviceGetMemoryInfo", i, h)
            rx, tx = self._pcie.get(i, (None, None))
            samples.append(
                GpuSample(
                    index=i,
                    name=info.name,
                    uuid=info.uuid,
                    util_pct=None if util is None else float(util.gpu),
                    mem_util_pct=None if util is None else float(util.memory),
                    mem_used_bytes=None if mem is None else int(mem.used),
                    mem_total_bytes=None if mem is None else int(mem.total),
                    power_w=_div(q("nvmlDeviceGetPowerUsage", i, h), 1e3),
                    power_limit_w=info.power_limit_w,
                    energy_j=_div(q("nvmlDeviceGetTotalEnergyConsumption", i, h), 1e3),
                    temp_c=_div(q("nvmlDeviceGetTemperature", i, h, lib.NVML_TEMPERATURE_GPU), 1),
                    sm_clock_mhz=_div(q("nvmlDeviceGetClockInfo", i, h, lib.NVML_CLOCK_SM), 1),
                    mem_clock_mhz=_div(q("nvmlDeviceGetClockInfo", i, h, lib.NVML_CLOCK_MEM), 1),
                    throttle_reasons=self._throttle(i, h),
                    pcie_rx_bytes_s=rx,
                    pcie_tx_bytes_s=tx,
                    fan_pct=_div(q("nvmlDeviceGetFanSpeed", i, h), 1),
                    processes=self._processes(i, h),
                )
            )
        # Names of PIDs still on a GPU only: a PID the kernel reuses is named afresh.
        listed = {p.pid for gpu in samples for p in gpu.processes}
        self._proc_names = {pid: n for pid, n in self._proc_names.items() if pid in listed}
        return tuple(samples)

    def slow_sample(self) -> None:
        lib, q = self.query.lib, self.query
        for info, h in zip(self._info, self._handles, strict=True):
            # NVML answers KB/s.
            rx = _div(
                q("nvmlDeviceGetPcieThroughput", info.index, h, lib.NVML_PCIE_UTIL_RX_BYTES),
                1 / 1024,
            )
            tx = _div(
                q("nvmlDeviceGetPcieThroughput", info.index, h, lib.NVML_PCIE_UTIL_TX_BYTES),
                1 / 1024,
            )
            self._pcie[info.index] = (rx, tx)

    def close(self) -> None:
        try:
            self.query.lib.nvmlShutdown()
        except Exception as exc:  # shutting down: nothing left to do about it
            log.debug("nvmlShutdown: %s", exc)


def nvml_available(loader: Callable[[], Any] | None = None) -> bool:
    """True when NVML loads and sees at least one GPU."""
    try:
        import pynvml

        lib = loader() if loader else pynvml
        lib.nvmlInit()
        try:
            return int(lib.nvmlDeviceGetCount()) > 0
        finally:
            lib.nvmlShutdown()
    except Exception:
        return False
