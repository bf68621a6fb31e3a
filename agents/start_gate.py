"""The start-up health gate: after a start (or an engine's restart behind the agent's
back) the agent waits for the engine's own idea of ready, as long as the engine's spec
(``start_timeout_s``) or the start request (``health_timeout_s``) allows, and meanwhile
shows how long it has waited and the engine's newest log line, so a 20-minute load
is visibly a load and a stuck one says where it stuck."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable

from agents.catalog_adapter import get_spec
from agents.health_watch import Probe
from agents.runtime import Deployment, Runtime

HEALTH_TIMEOUT_RANGE_S = (1.0, 7200.0)
"""A start request's ``health_timeout_s`` bounds: at least one probe, at most two hours."""
LOG_REFRESH_S = 2.0
"""How often the gate reads the engine's newest log line (a Compose engine's costs a
``compose logs`` process)."""
LOG_LINE_CHARS = 300


def checked_health_timeout(value: object) -> float | None:
    """A start request's ``health_timeout_s``: None, or seconds within the bounds."""
    if value is None:
        return None
    low, high = HEALTH_TIMEOUT_RANGE_S
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        raise ValueError(
            f"health_timeout_s must be a number of seconds from {low:.0f} to {high:.0f}, "
            f"not {value!r}: nothing was started"
        )
    return float(value)


async def health_gate(
    dep: Deployment,
    runtime: Runtime,
    probe: Probe,
    emit: Callable[[str, str, str], object],
    has_model: Callable[[Deployment], Awaitable[bool]],
) -> bool:
    """True once the engine is ready (a loading 503 is not a failure) and ``has_model``
    (an engine serving models by name has pulled its model); False, with the reason and
    the engine's last log line in ``dep.message``, when it died, ran out of time or could
    not get its model."""
    path = get_spec(dep.kind).health_path
    limit_s = dep.start_timeout_s or get_spec(dep.kind).start_timeout_s
    begun = time.monotonic()
    next_log = begun
    while time.monotonic() - begun < limit_s:
        if dep.state == "crashed":  # the watcher saw it die
            break
        status, health = await probe(dep)
        if health == "ready":
            dep.state, dep.health, dep.message = "loading", "loading", None
            if not await has_model(dep):  # a pull takes as long as it streams progress
                break
            dep.state, dep.health, dep.healthy_at = "ready", "healthy", time.time()
            dep.last_log_line = None  # the message is None, or what has_model did
            pulled = f"; {dep.message}" if dep.message else ""
            emit("healthy", dep.id, f"{dep.url}{path} answered {status}{pulled}")
            return True
        dep.state, dep.health = "loading", "loading"
        if status is None and await runtime.status(dep) != "running":
            dep.message = "the engine exited before it became healthy"
            break
        if time.monotonic() >= next_log:
            dep.last_log_line = await last_log_line(dep, runtime)
            next_log = time.monotonic() + LOG_REFRESH_S
        dep.message = f"waiting for {path}: {time.monotonic() - begun:.0f} of {limit_s:.0f} s"
        await asyncio.sleep(0.5)
    else:
        dep.message = f"not healthy within {limit_s:.0f} s"
    dep.state, dep.health = "crashed", "dead"
    dep.last_log_line = await last_log_line(dep, runtime)
    dep.message = dep.message or "died while starting"
    if dep.last_log_line:
        dep.message += f"; its last log line: {dep.last_log_line}"
    emit("failed", dep.id, dep.message)
    return False


async def last_log_line(dep: Deployment, runtime: Runtime) -> str | None:
    """The engine's newest non-blank log line (the one before where none can be read)."""
    last = None
    with contextlib.suppress(Exception):  # no log yet, Docker slow: keep the one before
        async with asyncio.timeout(5):
            async for line in runtime.logs(dep, 5, False):
                last = line.strip() or last
    return last[:LOG_LINE_CHARS] if last else dep.last_log_line
