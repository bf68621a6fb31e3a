"""Simulated engines (sim) as a runtime: the demo's fleet without GPUs.

A simulator imitates one engine's HTTP surface and metrics dialect, so the
manager health-gates and scrapes it exactly like the real engine; its frames
say ``simulated: true``.  Simulators live in the agent's event loop, so they
end with the agent and are never adopted.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from agents.runtime import Deployment, ExitCallback, RuntimeError_


class SimRuntime:
    name = "sim"
    survives_agent = False

    def __init__(self) -> None:
        self._running: dict[str, Any] = {}

    def kind_of(self, launch: dict[str, Any]) -> str:
        """The engine kind a start request's profile imitates (validates the profile)."""
        from sim import ProfileError, load_profile

        name = launch.get("profile")
        if not isinstance(name, str) or not name:
            raise RuntimeError_("a simulated engine needs config.profile (see list_profiles())")
        try:
            return str(load_profile(name).kind)
        except ProfileError as exc:
            raise RuntimeError_(str(exc)) from exc

    def _faults(self, dep: Deployment) -> Any:
        """Faults (crash_after, error_rate, load_time_s, ...) let a demo show failures."""
        from sim import FaultConfig

        faults = dep.config.get("faults")
        try:
            return FaultConfig(**faults) if faults else None
        except (TypeError, ValueError) as exc:
            raise RuntimeError_(f"simulator faults refused: {exc}") from exc

    def check(self, dep: Deployment) -> None:
        self._faults(dep)  # the profile was read by kind_of

    async def start(self, dep: Deployment) -> None:
        from sim import ProfileError, start_sim

        cfg = dep.config
        faults = self._faults(dep)
        try:
            running = await start_sim(
                str(cfg["profile"]),
                host=dep.host,
                port=dep.port or 0,
                seed=int(cfg.get("seed") or 0),
                time_scale=cfg.get("time_scale"),
                faults=faults,
            )
        except (ProfileError, OSError, TypeError, ValueError) as exc:
            raise RuntimeError_(f"simulator did not start: {exc}") from exc
        dep.port = running.port
        self._running[dep.id] = running

    def forget(self, dep: Deployment) -> str:
        self._running.pop(dep.id, None)
        return "a simulator leaves nothing behind"

    async def stop(self, dep: Deployment, timeout_s: float) -> None:
        running = self._running.pop(dep.id, None)
        if running is not None:
            await asyncio.wait_for(running.stop(), timeout_s)

    async def status(self, dep: Deployment) -> str:
        running = self._running.get(dep.id)
        if running is None:
            return "missing"
        return "exited" if running.crashed else "running"

    async def exit_code(self, dep: Deployment) -> int | None:
        return None  # a simulator has no process to end

    async def logs(self, dep: Deployment, tail: int, follow: bool) -> AsyncIterator[str]:
        running = self._running.get(dep.id)
        profile = running.profile.name if running else dep.config.get("profile")
        yield f"simulated engine (profile {profile}): simulators write no log"

    async def adopt(self) -> list[Deployment]:
        return []

    def watch(self, on_exit: ExitCallback) -> Callable[[], None] | None:
        async def poll() -> None:
            reported: set[str] = set()
            while True:
                for dep_id, running in list(self._running.items()):
                    if running.crashed and dep_id not in reported:
                        reported.add(dep_id)
                        on_exit(dep_id, "the simulator crashed (injected fault)", time.time())
                await asyncio.sleep(0.5)

        task = asyncio.get_running_loop().create_task(poll(), name="sim-watch")

        def unwatch() -> None:
            task.cancel()

        return unwatch
