"""Load runs generated on the engine's own node, recorded here (docs/design.md, "The run
path").

The agent runs the load test next to the engine (``agents/loadruns.py``) and numbers every
event it emits; the control plane reads them (``AgentClient.load_events``) and hands each
one to its recorder exactly once: it keeps the number of the last event it handed over,
and when the connection drops it reconnects (with back-off, for a bounded time) asking
only for what came after that number, and passes over any number it already has. The run
goes on on the node meanwhile, and the node keeps its events on disk, so a link that comes
back loses nothing. Closing the iterator early stops the run on the node; its cut requests
still reach the recorder.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncGenerator, Callable
from pathlib import Path
from typing import TYPE_CHECKING

from agents.client import AgentClient, AgentError
from control.reach import find_node
from control.transport import connected
from loadgen.setup import plain
from runs.events import (
    END_EVENTS,
    ProgressEvent,
    RunEvent,
    RunEventSink,
    RunFinished,
    RunInterrupted,
    RunResult,
)
from runs.records import RequestRecord
from runs.setup import Origin

if TYPE_CHECKING:
    from loadgen.profiles import LoadSpec
    from loadgen.workload import Workload

log = logging.getLogger(__name__)

RECONNECT_BUDGET_S = 300.0
"""How long a lost node may stay unreachable before the run is given up here (the node
keeps it)."""
FIRST_RETRY_S = 0.25
MAX_RETRY_S = 5.0
READ_TIMEOUT_S = 20.0
"""A stream silent this long is dead: the agent writes at least every few seconds."""
STOP_DRAIN_S = 60.0
"""How long a run stopped from here gets to send its last (cut) requests."""


async def run_on_node(
    client: AgentClient,
    engine_id: str,
    spec: LoadSpec,
    workload: Workload,
    record: RunEventSink,
    *,
    model: str,
    chat: bool = True,
    origin: Origin = "script",
    name: str | None = None,
    reconnect_budget_s: float = RECONNECT_BUDGET_S,
    read_timeout_s: float = READ_TIMEOUT_S,
) -> AsyncGenerator[ProgressEvent, None]:
    """Start the run on the engine's node and follow it (``follow_node_run``)."""
    run = await client.start_load(
        engine_id, plain(spec), plain(workload), model=model, chat=chat, origin=origin, name=name
    )
    events = follow_node_run(
        client,
        run.run_id,
        record,
        reconnect_budget_s=reconnect_budget_s,
        read_timeout_s=read_timeout_s,
    )
    async with contextlib.aclosing(events):  # closing this one stops the run on the node
        async for event in events:
            yield event


async def follow_node_run(
    client: AgentClient,
    run_id: str,
    record: RunEventSink,
    *,
    reconnect_budget_s: float = RECONNECT_BUDGET_S,
    read_timeout_s: float = READ_TIMEOUT_S,
) -> AsyncGenerator[ProgressEvent, None]:
    """Yield the node's run's progress events, the last of them its end; ``record`` gets
    every event (finished requests too) once, in order.  Use ``contextlib.aclosing``: an
    iterator closed before the end stops the run on the node and records what it cut."""
    last_seq = 0
    done = False
    lost_at: float | None = None
    retry_s = FIRST_RETRY_S
    try:
        while True:
            try:
                stream = client.load_events(run_id, last_seq, read_timeout_s=read_timeout_s)
                async with contextlib.aclosing(stream):
                    async for seq, event in stream:
                        if seq <= last_seq:
                            continue  # already recorded: never stored twice
                        record.on_event(event)
                        last_seq, lost_at, retry_s = seq, None, FIRST_RETRY_S
                        if isinstance(event, RequestRecord):
                            continue
                        done = isinstance(event, END_EVENTS)
                        yield event
                        if done:
                            return
                raise AgentError(0, "the events stream ended before the run did")
            except AgentError as exc:
                if exc.status:  # the agent answered: no such run (it restarted)
                    done = True
                    yield _give_up(record, f"the node's agent refused run {run_id}: {exc}")
                    return
                lost_at = time.monotonic() if lost_at is None else lost_at
                if time.monotonic() - lost_at > reconnect_budget_s:
                    done = True
                    yield _give_up(
                        record,
                        f"lost the node's agent for {reconnect_budget_s:g} s ({exc.message}): "
                        f"run {run_id} may go on there",
                    )
                    return
                log.info("run %s: %s; again in %g s", run_id, exc.message, retry_s)
                await asyncio.sleep(retry_s)
                retry_s = min(retry_s * 2, MAX_RETRY_S)
    finally:
        if not done:
            await stop_node_run(client, run_id, record, last_seq)


def _give_up(record: RunEventSink, reason: str) -> RunInterrupted:
    event = RunInterrupted(reason)
    record.on_event(event)
    return event


async def stop_node_run(
    client: AgentClient, run_id: str, record: RunEventSink, last_seq: int = 0
) -> None:
    """Stop the run on the node and record what came after ``last_seq``: the requests it
    finished meanwhile, those it cut, its end."""
    try:
        async with asyncio.timeout(STOP_DRAIN_S):
            await client.cancel_load(run_id)
            stream = client.load_events(run_id, last_seq)
            async with contextlib.aclosing(stream):
                async for seq, event in stream:
                    if seq > last_seq:
                        record.on_event(event)
                        last_seq = seq
    except (AgentError, TimeoutError) as exc:
        record.on_event(RunInterrupted(f"stopped; the node did not say how it ended: {exc}"))


class NodeRunEnded(Exception):
    """A node-side run ended without a result (it failed, or was stopped): in its words."""


class EmitSink:
    """A plain callback as a ``RunEventSink`` (the headless bench's printer)."""

    def __init__(self, emit: Callable[[RunEvent], None]) -> None:
        self.on_event = emit


async def run_result(events: AsyncGenerator[ProgressEvent, None], where: str) -> RunResult:
    """Follow a node-side run's events to its end: its result, or NodeRunEnded saying
    how the run ``where`` ended without one."""
    last: ProgressEvent | None = None
    async with contextlib.aclosing(events):
        async for event in events:
            last = event
    if isinstance(last, RunFinished):
        return last.result
    raise NodeRunEnded(f"the run {where} ended without a result: {last}")


async def bench_on_node(
    config_file: Path | None,
    node_name: str,
    engine_id: str,
    spec: LoadSpec,
    workload: Workload,
    emit: Callable[[RunEvent], None],
    *,
    model: str,
    chat: bool,
    name: str | None,
) -> RunResult:
    """``infer-top bench --node --engine-id``: the run generated on the engine's node,
    every event to ``emit``; its result, or NodeRunEnded when it had none."""
    node = find_node(config_file, node_name)
    async with connected(node) as client:
        events = run_on_node(
            client, engine_id, spec, workload, EmitSink(emit),
            model=model, chat=chat, origin="bench", name=name,
        )  # fmt: skip
        return await run_result(events, f"on node {node_name}")
