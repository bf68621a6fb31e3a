"""The conditions: which targets of a frame (or a node, or a run) a rule holds for
now.  Hold-down is the engine's job (``alerts.engine``); a rule only says "holds,
with this value".  Trend rules keep a short history per engine here."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator

import pynvml

from alerts.config import AlertConfig
from alerts.model import Alert, Observation
from runs.records import LevelSummary
from telemetry import EngineTelemetry, GpuSample, TelemetryFrame

# NVML's clocks-event (throttle) reasons, by the constants' own names (nvml.h,
# nvmlClocksThrottleReason*), grouped by the rule each one raises.  Idle, application
# clocks, sync boost and display clocks are the GPU's normal choices: no alert.
THROTTLE_RULES: dict[str, tuple[tuple[int, str], ...]] = {
    "power_throttled": (
        (pynvml.nvmlClocksThrottleReasonSwPowerCap, "SwPowerCap"),
        (pynvml.nvmlClocksThrottleReasonHwPowerBrakeSlowdown, "HwPowerBrakeSlowdown"),
    ),
    "thermal_throttled": (
        (pynvml.nvmlClocksThrottleReasonSwThermalSlowdown, "SwThermalSlowdown"),
        (pynvml.nvmlClocksThrottleReasonHwThermalSlowdown, "HwThermalSlowdown"),
    ),
    "hw_slowdown": ((pynvml.nvmlClocksThrottleReasonHwSlowdown, "HwSlowdown"),),
}

FRAME_RULES = (
    "engine_exited",
    "health_lost",
    *THROTTLE_RULES,
    "gpu_temperature",
    "kv_cache_full",
    "preemptions_rising",
    "queue_growing",
    "disk_nearly_full",
)
"""The rules a node's frame decides: an alert of these whose target is not in a newer
frame of its node (an engine removed, a GPU gone) has its condition gone."""


def throttle_reason_names(mask: int) -> list[str]:
    """Every alerting reason set in an NVML throttle-reasons bitmask, by NVML's name."""
    return [name for reasons in THROTTLE_RULES.values() for bit, name in reasons if mask & bit]


class FrameRules:
    """Evaluates the frame rules; one per control plane (it keeps trend histories)."""

    def __init__(self, config: AlertConfig) -> None:
        self.config = config
        self._trends: dict[str, dict[tuple[str, str], deque[tuple[float, float]]]] = {}
        """By node, then (rule, engine id): each engine's recent values of a trend rule."""

    def observe(self, frame: TelemetryFrame) -> list[Observation]:
        """What holds in ``frame``: one observation per rule and target."""
        found = [
            *self._disk(frame),
            *(o for gpu in frame.gpus for o in self._gpu(frame.node, gpu)),
            *(o for eng in frame.engines for o in self._engine(frame, eng)),
        ]
        trends = self._trends.get(frame.node)
        if trends:
            # an engine gone from its node's frames takes its trends along: kept, every
            # engine ever started and stopped stayed in the control plane's memory
            here = {eng.id for eng in frame.engines}
            for key in [key for key in trends if key[1] not in here]:
                del trends[key]
        return [o for o in found if self.config.enabled(o.rule)]

    def _gpu(self, node: str, gpu: GpuSample) -> Iterator[Observation]:
        mask = gpu.throttle_reasons or 0
        for rule, reasons in THROTTLE_RULES.items() if mask else ():
            names = [name for bit, name in reasons if mask & bit]
            if names:
                value = gpu.temp_c if rule == "thermal_throttled" else gpu.power_w
                limit = f" of its {gpu.power_limit_w:.0f} W cap" if gpu.power_limit_w else ""
                at = f"{gpu.power_w:.0f} W{limit}" if gpu.power_w is not None else "n/a W"
                if rule == "thermal_throttled":
                    at = f"{gpu.temp_c:.0f} °C" if gpu.temp_c is not None else "n/a °C"
                yield Observation(
                    rule,
                    node,
                    gpu_index=gpu.index,
                    value=value,
                    message=f"gpu{gpu.index} clocks held down by {', '.join(names)} at {at}",
                )
        limit_c = self.config.rule("gpu_temperature").threshold
        if gpu.temp_c is not None and limit_c is not None and gpu.temp_c >= limit_c:
            yield Observation(
                "gpu_temperature",
                node,
                gpu_index=gpu.index,
                value=gpu.temp_c,
                message=f"gpu{gpu.index} at {gpu.temp_c:.0f} °C (limit {limit_c:.0f} °C)",
            )

    def _engine(self, frame: TelemetryFrame, e: EngineTelemetry) -> Iterator[Observation]:
        node = frame.node
        if e.state == "crashed":
            code = "unknown" if e.exit_code is None else str(e.exit_code)
            last = f"; last log line: {e.last_log_line}" if e.last_log_line else ""
            yield Observation(
                "engine_exited",
                node,
                engine_id=e.id,
                value=None if e.exit_code is None else float(e.exit_code),
                message=f"{e.kind} engine {e.id} exited with code {code}{last}",
            )
        if e.state == "ready" and e.health in ("unhealthy", "dead"):
            yield Observation(
                "health_lost",
                node,
                engine_id=e.id,
                message=f"{e.kind} engine {e.id} is {e.health} after it was ready",
            )
        kv_limit = self.config.rule("kv_cache_full").threshold
        kv = e.kv_cache_usage
        if kv is not None and kv_limit is not None and kv >= kv_limit:
            yield Observation(
                "kv_cache_full",
                node,
                engine_id=e.id,
                value=kv,
                message=f"{e.kind} engine {e.id} KV cache {kv:.0%} used (limit {kv_limit:.0%})",
            )
        rise = self._rise(frame, e, "preemptions_rising", e.preemptions_total)
        if rise is not None and rise > 0:
            yield Observation(
                "preemptions_rising",
                node,
                engine_id=e.id,
                value=rise,
                message=f"{e.kind} engine {e.id} preempted {rise:.0f} requests lately",
            )
        waiting = e.requests_waiting
        growth = self._rise(frame, e, "queue_growing", waiting)
        least = self.config.rule("queue_growing").threshold or 0.0
        if waiting is not None and growth is not None and growth > 0 and waiting >= least:
            yield Observation(
                "queue_growing",
                node,
                engine_id=e.id,
                value=waiting,
                message=f"{e.kind} engine {e.id} has {waiting:.0f} requests waiting "
                f"(+{growth:.0f} within {self.config.rule('queue_growing').window_s:.0f} s)",
            )

    def _rise(
        self, frame: TelemetryFrame, e: EngineTelemetry, rule: str, value: float | None
    ) -> float | None:
        """How much ``value`` grew over the rule's window (None until there is a past)."""
        window_s = self.config.rule(rule).window_s or 0.0
        trends = self._trends.setdefault(frame.node, {})
        points = trends.get((rule, e.id))
        if points is None:
            points = trends[(rule, e.id)] = deque(maxlen=4096)
        if value is None:
            points.clear()
            return None
        while points and points[0][0] < frame.ts - window_s:
            points.popleft()
        points.append((frame.ts, value))
        if len(points) < 2:
            return None
        return value - min(v for _, v in points)

    def _disk(self, frame: TelemetryFrame) -> Iterator[Observation]:
        host = frame.host
        used, total = host.data_dir_used_bytes, host.data_dir_total_bytes
        limit = self.config.rule("disk_nearly_full").threshold
        if used is None or not total or limit is None:
            return
        if used / total >= limit:
            yield Observation(
                "disk_nearly_full",
                frame.node,
                value=used / total,
                message=f"the agent's data dir disk is {used / total:.0%} full "
                f"({(total - used) / 2**30:.1f} GiB free)",
            )


def stale_observation(
    node: str, age_s: float | None, error: str | None, config: AlertConfig
) -> Observation | None:
    """The node rule: no frame for the rule's threshold seconds (``age_s``: since the
    newest frame, or since watching began when none came)."""
    limit = config.rule("node_unreachable").threshold or 0.0
    if age_s is None or age_s < limit or not config.enabled("node_unreachable"):
        return None
    why = f": {error}" if error else ""
    return Observation(
        "node_unreachable",
        node,
        value=age_s,
        message=f"no telemetry from {node} for {age_s:.0f} s{why}",
    )


def run_observation(
    node: str, engine_id: str | None, run_id: str, level: LevelSummary, config: AlertConfig
) -> Observation | None:
    """The run rule, judged as each load level finishes."""
    limit = config.rule("run_failures").threshold or 0.0
    total = level.completed + level.failed
    if not total or not config.enabled("run_failures"):
        return None
    rate = level.failed / total
    if rate <= limit:
        return None
    return Observation(
        "run_failures",
        node,
        engine_id=engine_id,
        run_id=run_id,
        value=rate,
        message=f"run {run_id} level {level.level_index}: {level.failed} of {total} requests "
        f"failed ({rate:.0%}, limit {limit:.0%})",
    )


def value_text(alert: Alert) -> str:
    """The value at raise, with its unit, as lists show it."""
    v = alert.value
    if v is None:
        return "n/a"
    match alert.rule:
        case "engine_exited":
            return f"exit {v:.0f}"
        case "power_throttled" | "hw_slowdown":
            return f"{v:.0f} W"
        case "thermal_throttled" | "gpu_temperature":
            return f"{v:.0f} °C"
        case "kv_cache_full" | "run_failures" | "disk_nearly_full":
            return f"{v:.0%}"
        case "node_unreachable":
            return f"{v:.0f} s"
        case _:
            return f"{v:g}"
