"""The thin boundary between the TUI and the domain.

Screens and workers call the domain only through a :class:`Services` value:
agents (one client per node), the run store, the load runner, the clock.  The
CLI and the demo build one with real parts (:mod:`control.wiring`); tests build one
with real parts too, or leave a part out (``None``) and the screen says so.
Nothing here imports Textual.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path

from agents.client import AgentError
from control.backoff import Backoff
from control.loads import LoadRunner
from control.nodes import NodeHandle
from store import Store, StoreWriteError

Report = Callable[[str, float | None, bool], None]


@dataclass(slots=True)
class Services:
    nodes: tuple[NodeHandle, ...] = ()
    store: Store | None = None
    """The run store (sqlite) or None; reads go through a worker thread."""
    load_runner: LoadRunner | None = None
    """Runs a load test, yielding its progress events (``control.loads.run_load``), or None."""
    clock: Callable[[], float] = time.time
    stream_telemetry: bool = True
    """False in snapshot tests: they feed fixed frames instead of live streams."""
    backoff: Backoff = field(default_factory=Backoff)
    banner: str = ""
    """A line shown on every screen (the demo says what is simulated)."""
    exports_dir: Path = field(default_factory=Path.cwd)
    on_start: Callable[[Report], Awaitable[None]] | None = None
    """Slow start-up work the app runs in a worker (the demo's precomputed runs);
    it reports progress as (text, fraction 0-1 or None, done)."""
    exit_stack: AsyncExitStack = field(default_factory=AsyncExitStack)
    store_error_listeners: list[Callable[[StoreWriteError], None]] = field(default_factory=list)
    """Told of each failed store write, on the store writer's thread (the TUI shows it)."""

    def node(self, name: str) -> NodeHandle | None:
        return next((n for n in self.nodes if n.name == name), None)

    def report_store_error(self, error: StoreWriteError) -> None:
        """The store's ``on_error``: rows could not be written (a full disk)."""
        for listener in self.store_error_listeners:
            listener(error)

    async def aclose(self) -> None:
        await self.exit_stack.aclose()


def describe_error(exc: BaseException) -> str:
    """An exception as words for the operator (status and message when the agent sent them)."""
    text = str(exc).strip()
    if isinstance(exc, AgentError) and exc.message:
        status, message = exc.status, exc.message
        return f"unreachable: {message}" if status == 0 else f"agent answered {status}: {message}"
    if isinstance(exc, ValueError | TypeError | KeyError):
        # a JSON decode error, a frame that does not parse: the peer is not (this) agent
        return f"garbled answer, not telemetry ({type(exc).__name__}: {text})"
    if isinstance(exc, TimeoutError):
        return "timed out"
    if isinstance(exc, ConnectionError | OSError):
        return text or "connection refused"
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
