"""The GPU telemetry of a headless bench's run window, from the engine's agent.

The TUI keeps a node's frames in the store while a load test runs against it
(``tui.app.InferTopApp.ingest``); ``infer-top bench --node --engine-id`` does the same
here, whichever way the load goes (generated on the node, through the agent's proxy, or
over several load nodes), so the store turns the run's GPU energy into tok/J
(``store.energy``) for CLI runs as for TUI runs. Replayed GPUs are not kept (their energy
has nothing to do with the run), and a bench against a bare ``--url`` has no agent to ask:
both leave the run's energy unknown, shown as n/a, never 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Coroutine
from dataclasses import dataclass, replace
from typing import TypeVar

from control.config import NodeConfig
from control.services import describe_error
from control.transport import connected
from store import Store

T = TypeVar("T")

FRAME_WAIT_S = 5.0
"""How long to wait for a frame before the run starts and for one sampled at or after its
end (frames come each ``interval_s``, 1 s by default): the energy counter's samples span
the first and last levels' windows."""


@dataclass(frozen=True, slots=True)
class WindowTelemetry:
    """What the run's window got from the agent."""

    stored_frames: int
    replayed_frames: int
    """Frames of replayed (simulated) GPUs: not stored."""
    error: str | None
    """Why the stream stopped before the run ended, if it did."""

    def note(self) -> str | None:
        """Why the run has no energy figure, for the bench's stderr; None when it has."""
        if self.stored_frames:
            return None
        if self.replayed_frames:
            return "the node's GPUs are replayed (simulated): no energy or tok/J recorded"
        why = f": {self.error}" if self.error else ""
        return f"no GPU telemetry came from the node's agent{why}; energy and tok/J are n/a"


class _Tap:
    def __init__(self, node: NodeConfig, store: Store) -> None:
        self.node, self.store = node, store
        self.stored = self.replayed = 0
        self.last_ts = 0.0
        self.error: str | None = None
        self.arrived = asyncio.Event()

    async def follow(self) -> None:
        try:
            async with connected(self.node) as client:
                async for frame in client.stream():
                    if frame.simulated:
                        self.replayed += 1
                    else:
                        # the run's node is the config's name for it; the agent may call
                        # itself otherwise
                        self.store.add_telemetry([replace(frame, node=self.node.name)])
                        self.stored += 1
                    self.last_ts = frame.ts
                    self.arrived.set()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # no telemetry must never cost the run
            self.error = describe_error(exc)
        finally:
            self.arrived.set()

    async def until_frame_after(self, at: float, task: asyncio.Task[None]) -> None:
        """Until a frame sampled at or after ``at`` came, the stream ended, or
        ``FRAME_WAIT_S`` passed."""
        deadline = asyncio.get_running_loop().time() + FRAME_WAIT_S
        while self.last_ts < at and not task.done():
            left = deadline - asyncio.get_running_loop().time()
            if left <= 0:
                return
            self.arrived.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.arrived.wait(), left)


async def with_node_telemetry(
    node: NodeConfig, store: Store, running: Coroutine[object, None, T]
) -> tuple[T, WindowTelemetry]:
    """Await ``running`` while the node's frames go into ``store``; its result and what
    was recorded. The stream starts before the run and stops after a frame past its end
    (each wait bounded by ``FRAME_WAIT_S``)."""
    tap = _Tap(node, store)
    task = asyncio.get_running_loop().create_task(tap.follow(), name=f"telemetry {node.name}")
    try:
        await tap.until_frame_after(time.time(), task)
        result = await running
        await tap.until_frame_after(time.time(), task)
    finally:
        running.close()  # not started when the first wait was cut short; else a no-op
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    return result, WindowTelemetry(tap.stored, tap.replayed, tap.error)
