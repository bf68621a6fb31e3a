"""Jetson through jetson-stats' jtop service (``/run/jtop.sock``), preferred over
tegrastats where it runs: it already samples the board, so the agent adds no
second reader.  jetson-stats is the optional ``jetson`` extra."""

from __future__ import annotations

from typing import Any

from agents.collectors.jetson import TegraReading, board_name, reading_to_gpu
from agents.protocol import GpuInfo
from telemetry import GpuSample


def _get(obj: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(obj, dict) or key not in obj:
            return None
        obj = obj[key]
    return obj


def _num(value: Any, scale: float = 1.0) -> float | None:
    return float(value) * scale if isinstance(value, int | float) else None


def reading_from_jtop(memory: Any, gpu: Any, power: Any, temperature: Any) -> TegraReading:
    """jtop's dictionaries (jetson-stats 4.x) as the same reading tegrastats gives."""
    first_gpu: Any = next(iter(gpu.values()), {}) if isinstance(gpu, dict) and gpu else {}
    ram_total = _num(_get(memory, "RAM", "tot"), 1024)  # kB
    ram_used = _num(_get(memory, "RAM", "used"), 1024)
    rails = _get(power, "rail") or {}
    rails_w = {
        name: p / 1000
        for name, rail in rails.items()
        if (p := _num(_get(rail, "power"))) is not None
    }
    temps = {
        name: t
        for name, v in (temperature or {}).items()
        if (t := _num(_get(v, "temp"))) is not None and t > -200
    }
    return TegraReading(
        ram_used_bytes=None if ram_used is None else int(ram_used),
        ram_total_bytes=None if ram_total is None else int(ram_total),
        gpu_util_pct=_num(_get(first_gpu, "status", "load")),
        gpu_clock_mhz=_num(_get(first_gpu, "freq", "cur"), 1 / 1000),  # kHz
        temps_c=temps,
        rails_w=rails_w,
    )


class JtopCollector:
    platform = "jetson"
    unified_memory = True
    simulated = False
    driver_version: str | None = None

    def __init__(self, interval_s: float = 1.0) -> None:
        from jtop import jtop

        self._jtop: Any = jtop(interval=interval_s)
        self.name = board_name()
        self._rails: dict[str, float] = {}

    def open(self) -> tuple[GpuInfo, ...]:
        self._jtop.start()
        return (GpuInfo(index=0, name=self.name),)

    def sample(self) -> tuple[GpuSample, ...]:
        j = self._jtop
        reading = reading_from_jtop(j.memory, j.gpu, j.power, j.temperature)
        self._rails = reading.rails_w
        total = _num(_get(j.power, "tot", "power"))
        gpu = reading_to_gpu(reading, self.name)
        if total is not None:  # jtop knows which rails add up on this board
            from dataclasses import replace

            gpu = replace(gpu, power_w=total / 1000)
        return (gpu,)

    def slow_sample(self) -> None:
        return None

    def rails_w(self) -> dict[str, float]:
        return dict(self._rails)

    def close(self) -> None:
        self._jtop.close()
