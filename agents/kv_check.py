"""The KV-capacity check of every real start: once the engine is healthy, the agent
reads the capacity the engine states (its route, else its start-up log) and puts the
fit estimator's figure for the same launch beside it, with the difference, so the
estimator is checked against each engine that actually ran."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping

import aiohttp

from agents.catalog_adapter import get_spec, launch_config
from agents.protocol import KvCapacity
from agents.runtime import Deployment, Runtime
from engines.fit import FileShape, estimated_kv_capacity

FETCH_TIMEOUT_S = 5.0
LOG_LINES = 5000
"""How much of the start-up log is searched where the engine states it only there."""


async def kv_capacity_check(
    dep: Deployment,
    runtime: Runtime,
    session: aiohttp.ClientSession,
    gpu_mem_bytes: Mapping[int, int],
    platform: str,
    files: FileShape | None = None,
) -> KvCapacity:
    """``platform``: the node's engine platform (``cpu``: its engines run without a GPU);
    ``files``: the model's shape from the node's inventory (``engine_model_files``), used
    over the estimator's name table."""
    spec = get_spec(dep.kind)
    reported: int | None = None
    source = f"{spec.display_name} states no KV capacity infer-top reads"
    if spec.kv_capacity_path and dep.url:
        headers = {}
        if dep.config.get("api_key"):
            headers["Authorization"] = f"Bearer {dep.config['api_key']}"
        with contextlib.suppress(TimeoutError, aiohttp.ClientError):
            async with session.get(
                f"{dep.url}{spec.kv_capacity_path}",
                headers=headers,
                timeout=aiohttp.ClientTimeout(total=FETCH_TIMEOUT_S),
            ) as resp:
                if resp.status == 200:
                    reported = spec.kv_capacity(await resp.read())
        if reported is not None:
            source = spec.kv_capacity_path
    if reported is None and spec.kv_log_patterns:
        lines: list[str] = []
        with contextlib.suppress(Exception):  # no log to read: no figure, said so
            async with asyncio.timeout(FETCH_TIMEOUT_S):
                async for line in runtime.logs(dep, LOG_LINES, False):
                    lines.append(line)
        reported = spec.kv_capacity_from_log("\n".join(lines))
        if reported is not None:
            source = "start-up log"
    mems = [gpu_mem_bytes[g] for g in dep.gpu_ids if g in gpu_mem_bytes]
    estimated, basis = estimated_kv_capacity(
        dep.kind,
        launch_config(dep.config),
        min(mems) if mems else None,
        files,
        on_cpu=platform == "cpu",
    )
    return KvCapacity(
        reported_tokens=reported,
        estimated_tokens=estimated,
        difference_tokens=None if reported is None or estimated is None else reported - estimated,
        source=source,
        estimate_basis=basis,
    )
