"""The thin boundary between the TUI and the domain.

Screens and workers call the domain only through a :class:`Services` value:
agents (one client per node), the run store, the load runner, the clock.  The
CLI and the demo build one with real parts (:mod:`control.wiring`); tests build one
with real parts too, or leave a part out (``None``) and the screen says so.
Nothing here imports Textual.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from agents.protocol import EngineInfo, NodeInfo
from telemetry import TelemetryFrame

Report = Callable[[str, "float | None", bool], None]


class AgentLike(Protocol):
    """What the TUI needs of ``agents.client.AgentClient``."""

    async def node_info(self) -> NodeInfo: ...

    def stream(
        self, since_seq: int | None = None, *, reconnect: bool = True
    ) -> AsyncIterator[TelemetryFrame]: ...

    async def engines(self) -> Sequence[EngineInfo]: ...

    async def start(
        self,
        kind: str,
        config: dict[str, Any],
        gpus: list[int] | None = None,
        *,
        runtime: str | None = None,
        wait: bool = True,
    ) -> EngineInfo: ...

    async def stop(self, engine_id: str) -> Any: ...

    async def swap(self, engine_id: str, config: dict[str, Any]) -> Any: ...

    def logs(self, engine_id: str, tail: int = 200, follow: bool = False) -> AsyncIterator[str]: ...


@dataclass(frozen=True, slots=True)
class NodeHandle:
    name: str
    url: str
    client: AgentLike | None
    error: str | None = None
    """Why there is no client (a config error the Fleet screen shows in words)."""


@dataclass(frozen=True, slots=True)
class Backoff:
    """Retry delays for a node that stopped answering: doubling up to a cap."""

    initial_s: float = 0.5
    max_s: float = 15.0

    def delay(self, failures: int) -> float:
        return min(self.max_s, self.initial_s * 2.0 ** max(0, failures - 1))


@dataclass(slots=True)
class Services:
    nodes: tuple[NodeHandle, ...] = ()
    store: Any | None = None
    """A ``store.Store`` (sqlite) or None; reads go through a worker thread."""
    load_runner: Callable[..., AsyncIterator[Any]] | None = None
    """``loadgen`` entry point yielding progress events, or None."""
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

    def node(self, name: str) -> NodeHandle | None:
        return next((n for n in self.nodes if n.name == name), None)

    async def aclose(self) -> None:
        await self.exit_stack.aclose()


def describe_error(exc: BaseException) -> str:
    """An exception as words for the operator (status and message when the agent sent them)."""
    status = getattr(exc, "status", None)
    message = getattr(exc, "message", None)
    text = str(exc).strip()
    if isinstance(status, int) and message:
        return f"unreachable: {message}" if status == 0 else f"agent answered {status}: {message}"
    if isinstance(exc, ValueError | TypeError | KeyError):
        # a JSON decode error, a frame that does not parse: the peer is not (this) agent
        return f"garbled answer, not telemetry ({type(exc).__name__}: {text})"
    if isinstance(exc, TimeoutError):
        return "timed out"
    if isinstance(exc, ConnectionError | OSError):
        return text or "connection refused"
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
