"""Distributed load: one run split over several load nodes' agents, all against one
engine (docs/design.md, "The run path").

Each load node's agent generates its share (``split_spec``: concurrency, rate and
request counts divided, each share its own seed) as a node-side run: on the engine's own
node over loopback (``node-local``), on any other through the engine agent's proxy with
that agent's token (``proxied``, ``agents/peerloads.py``). Before the start the control
plane measures each node's clock offset over the agent API (NTP-style: its send and
receive times around the node's reading, the sample with the shortest round trip kept)
and has every share start at one instant, given to each node on its own clock. Each
share is followed as ``control.noderuns`` follows a node run (resuming after a cut link)
and merged into one run by ``control.merge``; the offsets are stored with the run.

Every node is reached over its link (``control.transport``: its URL, or an ssh tunnel). A
load node reached over ssh reaches the engine's agent back through its own ssh connection
(a remote forward to where this machine reaches that agent), so nodes that only ssh reaches
need not reach each other; a load node reached by URL calls the engine agent's URL, which
an engine node reached only over ssh does not have.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncGenerator, Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from agents.client import AgentClient, AgentError
from agents.protocol import engine_facts
from control.config import ConfigError, NodeConfig
from control.merge import Merger, ShareSink
from control.noderuns import EmitSink, follow_node_run, run_result, stop_node_run
from control.reach import find_node
from control.ssh_tunnel import SshTunnel
from control.transport import opened, reaching_back
from loadgen.process import new_run_id
from loadgen.profiles import ClosedLoop, Level, LoadSpec, ProfileError
from loadgen.runner import Target
from loadgen.setup import describe_run, plain
from runs.events import (
    ProgressEvent,
    RunEvent,
    RunEventSink,
    RunFailed,
    RunInterrupted,
    RunResult,
    RunStarted,
)
from runs.setup import LoadNodeShare, Origin

if TYPE_CHECKING:
    from loadgen.workload import Workload

CLOCK_SAMPLES = 8
START_LEAD_S = 5.0
"""How far ahead the shares' common start is set: time for each agent to start its load
worker (a spawned process) before the first request."""


@dataclass(frozen=True, slots=True)
class AgentRef:
    """A node's agent as the control plane reaches it."""

    name: str
    url: str
    token: str = field(repr=False)
    engine_url: str | None = None
    """The engine's agent as this node reaches it, where not at the engine's own ``url``
    (through this node's ssh connection back to the control plane)."""


@dataclass(frozen=True, slots=True)
class ClockReading:
    offset_s: float
    """The node's clock minus this machine's."""
    rtt_s: float
    """The round trip of the sample it came from: it is right to within half of it."""


async def measure_clock(client: AgentClient, samples: int = CLOCK_SAMPLES) -> ClockReading:
    """The node's clock offset from the sample with the shortest round trip (the least
    room for the network to skew it)."""
    best: ClockReading | None = None
    for _ in range(samples):
        sent = time.time()
        node = await client.clock()
        received = time.time()
        reading = ClockReading(node - (sent + received) / 2, received - sent)
        if best is None or reading.rtt_s < best.rtt_s:
            best = reading
    assert best is not None  # samples >= 1
    return best


def _part(total: int, shares: int, share: int) -> int:
    return total // shares + (1 if share < total % shares else 0)


def _split_level(level: Level, shares: int, share: int) -> Level:
    if isinstance(level, ClosedLoop):
        if level.concurrency < shares:
            raise ProfileError(
                f"concurrency {level.concurrency} cannot be split over {shares} load nodes "
                f"(each needs at least 1): use levels of {shares} or more"
            )
        return ClosedLoop(_part(level.concurrency, shares, share))
    cap = level.max_concurrency
    if cap is not None and cap < shares:
        raise ProfileError(f"max concurrency {cap} cannot be split over {shares} load nodes")
    return replace(
        level,
        rate_rps=level.rate_rps / shares,
        max_concurrency=None if cap is None else _part(cap, shares, share),
    )


def split_spec(spec: LoadSpec, shares: int) -> tuple[LoadSpec, ...]:
    """``spec`` as ``shares`` specs that together send it: each level's concurrency (or
    rate and cap) and the request and warm-up counts divided (the first shares take the
    remainder), share ``i`` with seed ``spec.seed + i`` so their arrivals are independent.
    ProfileError when a level is too small to give each share some."""
    requests = spec.requests_per_level
    if requests is not None and requests < shares:
        raise ProfileError(f"{requests} requests per level cannot be split over {shares} nodes")
    return tuple(
        replace(
            spec,
            levels=tuple(_split_level(level, shares, i) for level in spec.levels),
            requests_per_level=None if requests is None else _part(requests, shares, i),
            warmup_requests=_part(spec.warmup_requests, shares, i),
            seed=spec.seed + i,
        )
        for i in range(shares)
    )


def split_workload(workload: Workload, shares: int) -> tuple[Workload, ...]:
    """Share ``i`` draws its prompts with seed ``workload.seed + i`` (or its own salt when
    the prompts are fresh) and sends every ``shares``-th dataset entry from the ``i``-th:
    the shares do not send the same prompts (an engine's prefix cache would flatter the
    run)."""
    return tuple(
        replace(
            workload,
            salt=workload.salt if workload.seed is not None else f"{workload.salt}-{i}",
            seed=None if workload.seed is None else workload.seed + i,
            dataset_part=i,
            dataset_parts=shares,
        )
        for i in range(shares)
    )


@dataclass(frozen=True, slots=True)
class Share:
    """One share of a split run: the agent that generates it, and the agent whose engine
    (or replica of a Swarm service) it loads: over loopback where they are one node,
    else through that engine's agent's proxy."""

    load_node: AgentRef
    engine: AgentRef

    @property
    def node_local(self) -> bool:
        return self.load_node.name == self.engine.name


async def run_distributed(
    shares: Sequence[Share],
    engine_id: str,
    spec: LoadSpec,
    workload: Workload,
    record: RunEventSink,
    *,
    model: str | None = None,
    chat: bool = True,
    origin: Origin = "script",
    name: str | None = None,
    start_lead_s: float = START_LEAD_S,
) -> AsyncGenerator[ProgressEvent, None]:
    """The run split into ``shares``: against one engine (``Share(node, engine)`` for
    each load node), or over every replica of a Swarm service (``Share(node, node)`` for
    each replica's node: each replica is an engine of its node's agent, under the
    service's id, loaded over its loopback; each record then names the replica it hit,
    ``RequestRecord.engine_node``). The merged run's progress events, the last of them
    its end; ``record`` gets the merged run's every event. Closing it early stops every
    share on its node (their cut requests are recorded). ProfileError, AgentError before
    anything started."""
    names = [s.load_node.name for s in shares]
    if not names or len(set(names)) != len(names):
        raise ProfileError(f"name each load node once: {', '.join(names) or 'none'}")
    specs, workloads = split_spec(spec, len(names)), split_workload(workload, len(names))
    engines = list(dict.fromkeys(s.engine.name for s in shares))  # in the shares' order
    async with contextlib.AsyncExitStack() as stack:
        agents = {s.load_node.name: s.load_node for s in shares}
        agents.update((s.engine.name, s.engine) for s in shares)
        clients = {
            node: await stack.enter_async_context(AgentClient(ref.url, ref.token))
            for node, ref in agents.items()
        }
        infos = {node: await clients[node].engine(engine_id) for node in engines}
        for node, found in infos.items():
            if found.url is None:
                raise AgentError(409, f"engine {engine_id} on {node} has no address yet")
        info = infos[engines[0]]
        model = model or str(info.config.get("model") or "")
        clocks = {node: await measure_clock(client) for node, client in clients.items()}
        base_s = clocks[engines[0]].offset_s  # the run's timeline: the (first) engine's node
        setup = describe_run(
            spec,
            workload,
            Target(str(info.url), model, info.kind, chat=chat),
            origin=origin,
            name=name,
            node=",".join(engines),
            deployment_id=info.id,
            gpu_ids=tuple(info.gpu_ids) if len(engines) == 1 else (),
            simulated=info.simulated,
            load_node=",".join(names),
            path="distributed",
            load_nodes=tuple(
                LoadNodeShare(
                    s.load_node.name,
                    "node-local" if s.node_local else "proxied",
                    clocks[s.load_node.name].offset_s,
                    clocks[s.load_node.name].rtt_s,
                )
                for s in shares
            ),
            engine=engine_facts(info),
        )
        run_id = new_run_id()
        offsets = {node: clocks[node].offset_s - base_s for node in names}
        hit = [s.engine.name for s in shares] if len(engines) > 1 else None
        merger = Merger(run_id, spec, specs, names, offsets, record, engine_nodes=hit)
        start_s = time.time() + start_lead_s  # on this machine's clock
        yield merger.start(RunStarted(run_id, len(spec.levels), (), setup, start_s + base_s))
        started: list[tuple[int, str]] = []
        try:
            for i, share in enumerate(shares):
                client = clients[share.load_node.name]
                start_at = start_s + clocks[share.load_node.name].offset_s  # one instant
                load = (plain(specs[i]), plain(workloads[i]))
                if share.node_local:
                    run = await client.start_load(
                        engine_id, *load, model=model, chat=chat, origin=origin, name=name,
                        start_at=start_at,
                    )  # fmt: skip
                else:
                    run = await client.start_peer_load(
                        share.load_node.engine_url or share.engine.url, share.engine.token,
                        engine_id, *load, model=model, chat=chat, origin=origin, name=name,
                        start_at=start_at,
                    )  # fmt: skip
                started.append((i, run.run_id))
        except BaseException as exc:  # refused, or stopped meanwhile: stop those started
            for i, run_id_on_node in started:
                await stop_node_run(clients[names[i]], run_id_on_node, ShareSink(merger, i))
            if not isinstance(exc, AgentError):
                raise
            refused = names[len(started)]
            yield merger.end(RunFailed(f"load node {refused} refused its share: {exc}"))
            return
        events = follow_shares(
            merger,
            [follow_node_run(clients[names[i]], r, ShareSink(merger, i)) for i, r in started],
        )
        async with contextlib.aclosing(events):
            async for event in events:
                yield event


async def follow_shares(
    merger: Merger, runs: Sequence[AsyncGenerator[ProgressEvent, None]]
) -> AsyncGenerator[ProgressEvent, None]:
    """Follow every share's run at once (share ``i``'s events from ``runs[i]``, its
    records to ``ShareSink(merger, i)``), merging their events; a share that fails or is
    stopped stops the others (closing its generator stops it, its cut requests kept),
    and the run ends with its words."""
    queue: asyncio.Queue[tuple[int, ProgressEvent | Exception]] = asyncio.Queue()

    async def pump(share: int, events: AsyncGenerator[ProgressEvent, None]) -> None:
        try:
            async with contextlib.aclosing(events):
                async for event in events:
                    await queue.put((share, event))
        except Exception as exc:  # a bug or an undecodable event: the run ends with it
            await queue.put((share, exc))

    tasks = [asyncio.create_task(pump(i, run)) for i, run in enumerate(runs)]

    async def stop_all() -> None:  # each share stops, its cut requests kept
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    try:
        while merger.ended is None:
            share, item = await queue.get()
            merged: list[ProgressEvent] = (
                [RunFailed(f"{merger.share_name(share)}: {item!r}")]
                if isinstance(item, Exception)
                else merger.on_share_event(share, item)
            )
            for event in merged:
                if isinstance(event, RunFailed | RunInterrupted):
                    await stop_all()
                    yield merger.end(event)
                    return
                yield event
    finally:
        await stop_all()
        merger.end(RunInterrupted(f"stopped before the end: every {merger.kind}'s share stopped"))


async def bench_distributed(
    config_file: Path | None,
    engine_node: str,
    engine_id: str,
    load_nodes: Sequence[str],
    spec: LoadSpec,
    workload: Workload,
    emit: Callable[[RunEvent], None],
    *,
    model: str,
    chat: bool,
    name: str | None,
) -> RunResult:
    """``infer-top bench --node --engine-id --load-nodes``: the run split over the load
    nodes' agents, every event of the merged run to ``emit``; its result, or NodeRunEnded
    when it had none."""
    engine_config = find_node(config_file, engine_node)
    nodes = [find_node(config_file, name) for name in load_nodes]
    check_reach(engine_config, nodes)
    async with contextlib.AsyncExitStack() as stack:
        engine_link = await stack.enter_async_context(opened(engine_config))
        engine = AgentRef(engine_node, engine_link.url, engine_config.read_token())
        refs = []
        for node in nodes:
            if node.name == engine_node:
                refs.append(engine)
                continue
            link = await stack.enter_async_context(opened(node))
            ref = AgentRef(node.name, link.url, node.read_token())
            refs.append(await share_ref(stack, ref, link.tunnel, engine))
        events = run_distributed(
            [Share(ref, engine) for ref in refs], engine_id, spec, workload,
            EmitSink(emit), model=model, chat=chat, origin="bench", name=name,
        )  # fmt: skip
        return await run_result(events, f"on nodes {', '.join(load_nodes)}")


def unreachable(engine: tuple[str, bool], load_nodes: Sequence[tuple[str, bool]]) -> str | None:
    """Why a load node could not reach the engine's agent, in words, or None: one reached
    by URL (``(name, over_ssh)``), when the engine's node answers only through ssh."""
    engine_name, engine_over_ssh = engine
    for name, over_ssh in load_nodes:
        if engine_over_ssh and name != engine_name and not over_ssh:
            return (
                f"load node {name!r} is reached by URL, and node {engine_name!r}'s agent "
                f"answers only through ssh: {name} cannot reach it. Make {name} an ssh "
                f"node (it then reaches {engine_name} back through its own ssh connection), "
                f"or leave it out of the load nodes"
            )
    return None


def check_reach(engine: NodeConfig, load_nodes: Sequence[NodeConfig]) -> None:
    """ConfigError where a load node could not reach the engine's agent (``unreachable``)."""
    why = unreachable(
        (engine.name, engine.transport == "ssh"),
        [(n.name, n.transport == "ssh") for n in load_nodes],
    )
    if why is not None:
        raise ConfigError(why)


async def share_ref(
    stack: contextlib.AsyncExitStack,
    load_node: AgentRef,
    tunnel: SshTunnel | None,
    engine: AgentRef,
) -> AgentRef:
    """``load_node``'s agent (over ``tunnel`` where ssh reaches it) with its way to the
    engine's agent: a node over ssh reaches it back through ssh, for as long as ``stack``
    holds; one reached by URL at the engine agent's own URL."""
    if tunnel is None:
        return load_node
    back = await stack.enter_async_context(reaching_back(tunnel, engine.url))
    return replace(load_node, engine_url=back)
