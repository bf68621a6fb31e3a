"""The load tests the Load test screen offers, and how one is run (no Textual).

A run goes to ``loadgen.run_load_in_subprocess`` (its own process, so
the interface never stutters) and is saved to the store by the worker's sink.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, replace
from pathlib import Path

from control.nodes import NodeHandle
from runs.events import ProgressEvent


@dataclass(frozen=True, slots=True)
class LoadProfile:
    name: str
    concurrency: tuple[int, ...]
    requests_per_level: int
    input_len: int
    output_len: int

    @property
    def description(self) -> str:
        levels = ",".join(str(c) for c in self.concurrency)
        return (
            f"{self.name}: concurrency {levels} · {self.requests_per_level} requests each"
            f" · {self.input_len} in / {self.output_len} out tokens"
        )


PROFILES: tuple[LoadProfile, ...] = (
    LoadProfile("smoke", (1, 2), 4, 32, 16),
    LoadProfile("sweep", (1, 2, 4, 8, 16), 32, 256, 128),
    LoadProfile("seed-h100", (1, 2, 4, 8, 16, 32, 64), 128, 512, 256),
)


def profile(name: str) -> LoadProfile:
    for p in PROFILES:
        if p.name == name:
            return p
    raise KeyError(f"no load profile {name!r}; known: {', '.join(p.name for p in PROFILES)}")


@dataclass(frozen=True, slots=True)
class LoadRequest:
    """What the operator picked: one engine (as the fleet shows it) and a profile."""

    node: str
    engine_id: str
    engine_kind: str
    url: str
    model: str
    profile: LoadProfile
    simulated: bool = False
    gpu_ids: tuple[int, ...] = ()
    """The engine's GPUs: the store reads their energy over the run for tok/J."""


LoadRunner = Callable[[LoadRequest], AsyncIterator[ProgressEvent]]
"""Runs one load test, yielding its progress events (the app's ``Services.load_runner``)."""


def run_load(request: LoadRequest, store_path: Path | None = None) -> AsyncIterator[ProgressEvent]:
    """Progress events of the run; the last is ``RunFinished`` or ``RunFailed``.  With no
    ``store_path`` the run's worker saves nothing: the caller records the events."""
    from loadgen.profiles import LoadSpec, concurrency_sweep
    from loadgen.runner import Target
    from loadgen.subproc import SinkSpec, run_load_in_subprocess
    from loadgen.workload import Workload

    p = request.profile
    spec = LoadSpec(
        levels=concurrency_sweep(p.concurrency),
        requests_per_level=p.requests_per_level,
        request_timeout_s=120.0,
        stall_timeout_s=30.0,
    )
    workload = Workload(input_len=p.input_len, output_len=p.output_len)
    target = Target(url=request.url, model=request.model, engine_kind=request.engine_kind)
    where = SinkSpec(store_path=str(store_path) if store_path else None)
    return run_load_in_subprocess(spec, workload, target, where)


async def resolve_target(handle: NodeHandle | None, request: LoadRequest) -> LoadRequest:
    """The engine's GPUs and the model name it serves: the agent's deployment record on
    ``handle`` (the request's node) first, else the engine's own ``/v1/models`` (engines
    refuse a name they do not serve)."""
    if handle is not None and handle.client is not None:
        try:
            infos = await handle.client.engines()
        except Exception:  # the run itself will report an unreachable agent
            infos = []
        for info in infos:
            if info.id == request.engine_id:
                request = replace(request, gpu_ids=tuple(info.gpu_ids))
                model = info.config.get("model")
                if model:
                    return replace(request, model=str(model))
    served = await served_model(request.url)
    return replace(request, model=served) if served else request


async def served_model(base_url: str, timeout_s: float = 5.0) -> str | None:
    """The first model id the engine's OpenAI ``/v1/models`` lists (None if it cannot say)."""
    import aiohttp

    url = base_url.rstrip("/")
    url = url if url.endswith("/v1") else url + "/v1"
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s)) as s:
            async with s.get(f"{url}/models") as resp:
                if resp.status != 200:
                    return None
                data: object = await resp.json(content_type=None)
    except (aiohttp.ClientError, TimeoutError, ValueError):
        return None
    models = data.get("data") if isinstance(data, dict) else None
    if isinstance(models, list) and models and isinstance(models[0], dict):
        model_id = models[0].get("id")
        return str(model_id) if model_id else None
    return None
