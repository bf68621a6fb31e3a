"""The load on each replayed GPU, from the engines this agent runs on it, so that replayed
telemetry follows what the engines do (``agents.collectors.replay``): idle GPUs while the
engines idle, busy ones while they serve.

A GPU's load is read from the engines' newest frame (their running and waiting requests
or token rates, as each engine's own metrics say), so it follows them one sampling interval
behind, as a real GPU's utilisation would show in the next frame.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from agents.collectors import GpuCollector
from agents.collectors.nvml import NvmlCollector
from agents.collectors.replay import GpuLoad, ReplayNvml
from agents.runtime import Deployment
from telemetry import TelemetryFrame

GONE = frozenset({"stopped", "crashed"})
"""Deployment states that hold no GPU memory."""


def gpu_loads(
    deployments: Iterable[Deployment], frame: TelemetryFrame | None
) -> dict[int, GpuLoad]:
    """Per GPU index, the heaviest load of the engines on it (absent: none)."""
    engines = {e.id: e for e in frame.engines} if frame is not None else {}
    loads: dict[int, GpuLoad] = {}
    for dep in deployments:
        if dep.state in GONE:
            continue
        seen = engines.get(dep.id)
        # Requests in flight, or tokens made where an engine does not count those (Ollama).
        serving = seen is not None and any(
            (n or 0) > 0
            for n in (
                seen.requests_running,
                seen.requests_waiting,
                seen.generation_tok_s,
                seen.prompt_tok_s,
            )
        )
        load = GpuLoad.BUSY if serving else GpuLoad.HOLDING
        for index in dep.gpu_ids:
            loads[index] = max(loads.get(index, GpuLoad.EMPTY), load)
    return loads


def follow_engines(
    gpu: GpuCollector | None,
    deployments: Callable[[], Iterable[Deployment]],
    latest: Callable[[], TelemetryFrame | None],
) -> None:
    """Make a replayed GPU collector play each GPU's load; any other collector is left as
    it is (a real GPU shows its own)."""
    replay = gpu.query.lib if isinstance(gpu, NvmlCollector) else None
    if not isinstance(replay, ReplayNvml):
        return

    def load(index: int) -> GpuLoad:
        # Called from the sampler's device thread: take a copy of the deployments first.
        return gpu_loads(tuple(deployments()), latest()).get(index, GpuLoad.EMPTY)

    replay.load = load
