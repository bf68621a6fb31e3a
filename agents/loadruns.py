"""Load runs generated on the node, next to the engine (docs/design.md, "The run path").

``POST /v1/engines/{id}/loads`` runs a load test against that deployment's own engine URL
(never a URL the caller names) in a subprocess of its own (``loadgen.subproc``). Every
event it emits, each finished request included, is appended with a sequence number to an
owner-only JSONL file under the agent's state dir, so a control plane that lost its
connection resumes with ``GET /v1/loads/{run_id}/events?after=SEQ`` and misses nothing;
the file is bounded (a run that outgrows it fails in words). ``POST .../cancel`` stops the
worker with SIGTERM: its requests in flight are recorded as cut and the run ends
interrupted.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, get_args

from aiohttp import web

from agents.keys import CONFIG, MANAGER
from agents.manager import ManagerError
from agents.protocol import LoadRunInfo, engine_facts, to_dict
from agents.routes import AUDIT_DETAILS, audited, json_response, read_body, stream_lines
from agents.runtime import Deployment
from agents.security import open_private, private_dir
from loadgen.process import new_run_id
from loadgen.runner import Target
from loadgen.setup import describe_run, spec_from_plain, workload_from_plain
from loadgen.subproc import run_load_in_subprocess
from runs.codec import event_to_dict
from runs.events import END_EVENTS, RunEvent, RunFailed, RunInterrupted
from runs.setup import Origin, RunPath

KEEPALIVE_S = 5.0
"""An events stream with nothing new says so with a blank line this often, so a reader
can tell a quiet run from a dead link."""
LOAD_FIELDS: dict[str, type] = {
    "spec": dict,
    "workload": dict,
    "model": str,
    "chat": bool,
    "origin": str,
    "name": str,
    "start_at": float,
}
MAX_START_DELAY_S = 120.0
"""How far ahead a run's ``start_at`` may be: a start set later is a mistake (clocks)."""


@dataclass(frozen=True, slots=True)
class EngineWhere:
    """The engine a node-side run loads, and how this node reaches it."""

    node: str
    deployment_id: str
    gpu_ids: tuple[int, ...]
    simulated: bool
    path: RunPath
    engine: dict[str, Any] = field(default_factory=dict)
    """Its start options and KV check (``agents.protocol.engine_facts``), stored with the run."""


def _model(body: dict[str, Any]) -> str:
    model = body.get("model")
    if not model:
        raise ValueError("a load run needs 'model': the name the engine serves")
    return str(model)


def _start_at(value: float | None) -> float | None:
    """``start_at`` (epoch seconds on this node's clock) within the next
    ``MAX_START_DELAY_S``; ValueError in words otherwise."""
    if value is None:
        return None
    ahead_s = value - time.time()
    if not ahead_s <= MAX_START_DELAY_S:
        raise ValueError(
            f"start_at is {ahead_s:.1f} s ahead of this node's clock (at most "
            f"{MAX_START_DELAY_S:g} s): measure the clock offset again"
        )
    return value


@dataclass
class LoadRun:
    """One node-side run: its event file and who waits for what it writes next."""

    run_id: str
    deployment_id: str
    path: Path
    started_at: float
    last_seq: int = 0
    ended: str | None = None
    """The final event's type (RunFinished, RunFailed, RunInterrupted) once written."""
    size_bytes: int = 0
    task: asyncio.Task[None] | None = None
    waiters: set[asyncio.Event] = field(default_factory=set)

    def info(self) -> LoadRunInfo:
        state = "running" if self.ended is None else self.ended
        return LoadRunInfo(self.run_id, self.deployment_id, self.started_at, self.last_seq, state)


class _EventLog:
    """The run's record sink: every event, numbered, appended and flushed at once.

    ``loadgen.subproc`` delivers from its loop and, while a stopped worker drains, from
    a thread: writes hold a lock, and readers are woken on the loop."""

    def __init__(
        self, run: LoadRun, loop: asyncio.AbstractEventLoop | None, limit_bytes: int
    ) -> None:
        self.run = run
        self.loop = loop
        self.limit_bytes = limit_bytes
        self.lock = threading.Lock()
        self.file: IO[Any] = open_private(run.path, "a")

    def on_event(self, event: RunEvent, /) -> None:
        with self.lock:
            if self.run.ended is not None:
                return  # a run that failed on its limit says nothing more
            line = self._line(event)
            final = isinstance(event, END_EVENTS)
            if not final and self.run.size_bytes + len(line) > self.limit_bytes:
                event = RunFailed(
                    f"the run's event log reached its limit of {self.limit_bytes} bytes "
                    f"({self.run.path}): run fewer requests per run"
                )
                line, final = self._line(event), True
                self._soon(self._stop)
            self.file.write(line)
            self.file.flush()
            self.run.size_bytes += len(line)
            if final:
                self.run.ended = type(event).__name__
                self.file.close()
        self._soon(self._wake)

    def _soon(self, call: Callable[[], None]) -> None:
        if self.loop is not None:  # None: a run taken back at start, nobody waits yet
            self.loop.call_soon_threadsafe(call)

    def _line(self, event: RunEvent) -> str:
        seq = self.run.last_seq + 1
        self.run.last_seq = seq
        return json.dumps({"seq": seq, "event": event_to_dict(event)}) + "\n"

    def _stop(self) -> None:
        if self.run.task is not None:
            self.run.task.cancel()

    def _wake(self) -> None:
        for waiter in self.run.waiters:
            waiter.set()


def _taken_back(path: Path) -> LoadRun:
    """The run whose events an earlier agent wrote to ``path`` (a last line torn as it
    died is dropped)."""
    events = []
    for line in path.read_bytes().splitlines():
        with contextlib.suppress(json.JSONDecodeError):
            events.append(json.loads(line))
    path.write_bytes(b"".join(json.dumps(e).encode() + b"\n" for e in events))
    first = events[0]["event"] if events else {}
    setup = first.get("setup") or {}
    run = LoadRun(
        path.stem,
        str(setup.get("deployment_id") or ""),
        path,
        float(first.get("started_at") or path.stat().st_mtime),
        int(events[-1]["seq"]) if events else 0,
        size_bytes=path.stat().st_size,
    )
    last = str(events[-1]["event"].get("type")) if events else ""
    if last in {cls.__name__ for cls in END_EVENTS}:
        run.ended = last
    return run


KEEP_ENDED_RUNS = 200
"""Ended runs a node keeps (event file and entry), the newest: a control plane that lost
its connection resumes a run long after it ended, but not 200 runs later; kept for good,
every run ever made would fill the agent's memory and the node's disk."""


class LoadRuns:
    """The node's load runs, by id."""

    def __init__(self, state_dir: Path, node: str, limit_bytes: int) -> None:
        self.dir = state_dir / "loads"
        self.node = node
        self.limit_bytes = limit_bytes
        self.runs: dict[str, LoadRun] = {}

    def open(self) -> None:
        """Take back the runs an earlier agent left in the state dir, so a control plane
        that lost it resumes them; one that ended with that agent (its worker went with
        it) gets its end: interrupted."""
        if not self.dir.is_dir():
            return
        for path in sorted(self.dir.glob("*.jsonl")):
            run = _taken_back(path)
            if run.ended is None:
                sink = _EventLog(run, None, self.limit_bytes)
                sink.on_event(RunInterrupted("the agent stopped during the run"))
            self.runs[run.run_id] = run
        self._prune()

    def _prune(self) -> None:
        """Forget the oldest ended runs past ``KEEP_ENDED_RUNS``, their event files with
        them (one being read now stays until its reader is done)."""
        ended = [r for r in self.runs.values() if r.ended is not None and not r.waiters]
        for run in sorted(ended, key=lambda r: r.started_at)[
            : max(0, len(ended) - KEEP_ENDED_RUNS)
        ]:
            del self.runs[run.run_id]
            run.path.unlink(missing_ok=True)

    def get(self, run_id: str) -> LoadRun:
        try:
            return self.runs[run_id]
        except KeyError:
            raise ManagerError(404, f"no load run {run_id!r} on this agent") from None

    def start(self, dep: Deployment, body: dict[str, Any]) -> LoadRun:
        """Start the run ``body`` describes against ``dep``'s own engine; ValueError in
        words (a 400) when the body is not a load run."""
        if dep.url is None:
            raise ManagerError(409, f"engine {dep.id} has no address yet (state {dep.state})")
        target = Target(
            url=dep.url,
            model=_model(body),
            engine_kind=dep.kind,
            api_key=dep.config.get("api_key"),
            chat=body.get("chat", True),
        )
        where = EngineWhere(
            self.node,
            dep.id,
            tuple(dep.gpu_ids),
            dep.simulated,
            "node-local",
            engine_facts(dep.info()),
        )
        return self.launch(target, where, body)

    def launch(self, target: Target, where: EngineWhere, body: dict[str, Any]) -> LoadRun:
        """Run ``body``'s spec and workload at ``target`` from this node in a worker of
        its own, its events numbered into the run's file; ValueError in words (a 400)
        when the body is not a load run."""
        spec = spec_from_plain(body.get("spec"))
        workload = workload_from_plain(body.get("workload") or {})
        if workload.dataset is not None:
            raise ValueError("a node-side run takes synthetic prompts: no dataset path")
        origin = body.get("origin", "script")
        if origin not in get_args(Origin):
            raise ValueError(f"origin must be one of {', '.join(get_args(Origin))}")
        start_at = _start_at(body.get("start_at"))
        setup = describe_run(
            spec,
            workload,
            target,
            origin=origin,
            name=body.get("name"),
            node=where.node,
            deployment_id=where.deployment_id,
            gpu_ids=where.gpu_ids,
            simulated=where.simulated,
            load_node=self.node,
            path=where.path,
            engine=where.engine,
        )
        run_id = new_run_id()
        run = LoadRun(
            run_id, where.deployment_id, private_dir(self.dir) / f"{run_id}.jsonl", time.time()
        )
        sink = _EventLog(run, asyncio.get_running_loop(), self.limit_bytes)

        async def drive() -> None:
            events = run_load_in_subprocess(
                spec, workload, target, setup=setup, record=sink, run_id=run_id, start_at=start_at
            )
            async with contextlib.aclosing(events):
                async for _ in events:
                    pass

        run.task = asyncio.get_running_loop().create_task(drive(), name=f"load-{run_id}")
        self._prune()
        self.runs[run_id] = run
        return run

    async def follow(self, run_id: str, after: int) -> AsyncGenerator[bytes, None]:
        """The run's event lines after sequence number ``after``, then new ones as they
        are written, until the final event; a blank line every ``KEEPALIVE_S`` of quiet."""
        run = self.get(run_id)
        woken = asyncio.Event()
        run.waiters.add(woken)
        try:
            with run.path.open("rb") as file:
                pending = b""
                while True:
                    woken.clear()
                    ended = run.ended is not None  # read before the file: nothing is missed
                    pending += file.read()
                    *lines, pending = pending.split(b"\n")
                    for line in lines:
                        if json.loads(line)["seq"] > after:
                            yield line + b"\n"
                    if ended and not pending:
                        return
                    try:
                        await asyncio.wait_for(woken.wait(), KEEPALIVE_S)
                    except TimeoutError:
                        yield b"\n"
        finally:
            run.waiters.discard(woken)

    async def cancel(self, run_id: str) -> LoadRun:
        """Stop the run: the worker gets SIGTERM, records its cut requests, ends interrupted."""
        run = self.get(run_id)
        if run.task is not None and not run.task.done():
            run.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await run.task
        return run

    async def close(self) -> None:
        for run_id in list(self.runs):
            await self.cancel(run_id)


LOADS = web.AppKey("loads", LoadRuns)


@audited("load")
async def start_load(request: web.Request) -> web.StreamResponse:
    body = await read_body(request, LOAD_FIELDS)
    dep = request.app[MANAGER].get(request.match_info["id"])
    run = request.app[LOADS].start(dep, body)
    request[AUDIT_DETAILS] = {"engine": dep.id, "run_id": run.run_id}
    return json_response(to_dict(run.info()), status=201)


async def list_loads(request: web.Request) -> web.Response:
    return json_response({"loads": [to_dict(r.info()) for r in request.app[LOADS].runs.values()]})


async def load_events(request: web.Request) -> web.StreamResponse:
    raw = request.query.get("after", "0")
    try:
        after = int(raw)
    except ValueError:
        raise ManagerError(400, f"after must be a sequence number, not {raw!r}") from None
    lines = request.app[LOADS].follow(request.match_info["run_id"], after)
    try:
        first = await anext(lines)  # an unknown run is a 404 before the stream starts
    except StopAsyncIteration:
        first = b""  # an ended run with nothing after ``after``
    # a reader that goes away resumes from the last seq it stored
    return await stream_lines(request, first, lines)


@audited("load-cancel")
async def cancel_load(request: web.Request) -> web.StreamResponse:
    run = await request.app[LOADS].cancel(request.match_info["run_id"])
    return json_response(to_dict(run.info()))


async def _load_runs(app: web.Application) -> AsyncIterator[None]:
    config = app[CONFIG]
    loads = LoadRuns(config.state_dir, config.node_name, config.load_log_max_bytes)
    loads.open()
    app[LOADS] = loads
    try:
        yield
    finally:
        await loads.close()


def add_load_routes(app: web.Application) -> None:
    app.cleanup_ctx.append(_load_runs)
    app.router.add_post("/v1/engines/{id}/loads", start_load)
    app.router.add_get("/v1/loads", list_loads)
    app.router.add_get("/v1/loads/{run_id}/events", load_events)
    app.router.add_post("/v1/loads/{run_id}/cancel", cancel_load)
