"""The health watch: after its start-up gate, every ready engine's health route is
asked again every ``health_interval_s``, so a hung engine (SIGSTOP, a deadlock)
turns unhealthy with the time of its last good answer, and healthy again when it
answers.  Crashes are the runtimes' to report; this only judges engines that run."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping

from agents.catalog_adapter import UnknownEngine
from agents.runtime import Deployment

log = logging.getLogger(__name__)

PROBE_TIMEOUT_S = 2.0
"""One health probe's limit: an engine slower than this to say "ok" is not healthy."""

Probe = Callable[[Deployment], Awaitable[tuple[int | None, str]]]
"""One request to the engine's health route: (HTTP status or None, the spec's verdict)."""


class HealthWatch:
    def __init__(
        self,
        deployments: Mapping[str, Deployment],
        probe: Probe,
        emit: Callable[[str, str, str], object],
        *,
        interval_s: float,
        busy: Callable[[str], bool],
    ) -> None:
        self.deployments = deployments
        self.probe = probe
        self.emit = emit
        self.interval_s = interval_s
        self.busy = busy
        """True while a start, stop or swap judges the engine itself."""
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="health-watch")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            deps = [d for d in self.deployments.values() if d.state == "ready"]
            results = await asyncio.gather(
                *(self._recheck(d) for d in deps), return_exceptions=True
            )
            for dep, result in zip(deps, results, strict=True):
                if isinstance(result, Exception):  # one odd answer must not end the watch
                    log.error("health probe of engine %s failed", dep.id, exc_info=result)

    async def _recheck(self, dep: Deployment) -> None:
        if self.busy(dep.id):
            return
        try:
            status, health = await self.probe(dep)
        except UnknownEngine:  # adopted from labels naming an unknown kind: nothing to ask
            return
        if dep.state != "ready":
            return  # stopped or crashed while the probe waited
        if health == "ready":
            dep.healthy_at = time.time()
            if dep.health != "healthy":
                dep.health, dep.message = "healthy", "answering its health route again"
                self.emit("healthy", dep.id, dep.message)
            return
        # overloaded: it answers, busy (SGLang's 503 after ready); anything else is unhealthy
        verdict = "overloaded" if health == "overloaded" else "unhealthy"
        if dep.health == verdict or (health == "loading" and dep.health == "loading"):
            return
        last = (
            time.strftime("%H:%M:%S", time.localtime(dep.healthy_at)) if dep.healthy_at else "never"
        )
        silent = f"no answer (refused, or none within {PROBE_TIMEOUT_S:g} s)"
        answer = f"HTTP {status}" if status else silent
        if verdict == "overloaded":
            answer += ", too busy to pass its own health check (it was ready: not loading)"
        dep.health = verdict
        dep.message = f"health route: {answer}; last good answer {last}"
        self.emit(verdict, dep.id, dep.message)
