"""Exit polling: where no event stream reports an engine's exit, a metrics page that
stopped answering is how one shows, and the engine's runtime is asked whether it still
runs.  The question is asked in the background, one per engine at a time: a runtime's
answer (Docker listing a project's containers) takes seconds on a busy host, and the
node's frame, GPUs included, must not wait for it."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from agents.runtime import Deployment

log = logging.getLogger(__name__)


class ExitPoll:
    def __init__(self, ask: Callable[[Deployment], Awaitable[None]]) -> None:
        self.ask = ask
        """Asks the engine's runtime and reports an exit it finds."""
        self._asking: dict[str, asyncio.Task[None]] = {}

    def request(self, dep: Deployment) -> None:
        """Ask about ``dep`` unless a question about it is still out."""
        if dep.id in self._asking:
            return
        task = asyncio.get_running_loop().create_task(self._ask(dep), name=f"exit-poll-{dep.id}")
        self._asking[dep.id] = task
        task.add_done_callback(lambda _: self._asking.pop(dep.id, None))

    async def _ask(self, dep: Deployment) -> None:
        try:
            await self.ask(dep)
        except Exception:  # the next page that fails asks again
            log.exception("asking the runtime whether engine %s runs failed", dep.id)

    async def close(self) -> None:
        tasks = list(self._asking.values())
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
