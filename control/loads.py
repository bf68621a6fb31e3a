"""The load tests the Load test screen offers, and how one is run (no Textual).

By default the load is generated on the engine's node by its agent
(``control.noderuns``, path node-local), as ``infer-top bench --node`` does; "from
here" runs it in ``loadgen.run_load_in_subprocess`` (its own process, so the interface
never stutters) through the agent's proxy. Either way its events come back to the
caller's recorder (``store.recorder``), which stores it as ``infer-top bench --save``
would.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, Callable, Collection, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Literal

from agents.protocol import engine_facts
from control.nodes import NodeHandle
from control.reach import engine_route
from runs.events import ProgressEvent, RunEventSink, RunFailed
from runs.setup import RunPath, RunSetup

if TYPE_CHECKING:
    from loadgen.profiles import LoadSpec
    from loadgen.workload import Workload


@dataclass(frozen=True, slots=True)
class LoadProfile:
    name: str
    concurrency: tuple[int, ...]
    requests_per_level: int
    input_len: int
    output_len: int

    def spec(self) -> LoadSpec:
        """The load spec ``infer-top bench --concurrency ... --requests ...`` builds."""
        from loadgen.profiles import LoadSpec, concurrency_sweep

        return LoadSpec(concurrency_sweep(self.concurrency), self.requests_per_level)

    def workload(self) -> Workload:
        """The workload ``infer-top bench --input-len ... --output-len ...`` builds."""
        from loadgen.workload import Workload

        return Workload(input_len=self.input_len, output_len=self.output_len)

    def spread(self, nodes: int) -> LoadProfile:
        """The profile as ``nodes`` load nodes run it together (a distributed run): each
        node runs this profile's levels and request counts, so the run's are ``nodes``
        times as many (split back evenly by ``control.distributed.split_spec``)."""
        return replace(
            self,
            name=f"{self.name} x{nodes} nodes",
            concurrency=tuple(c * nodes for c in self.concurrency),
            requests_per_level=self.requests_per_level * nodes,
        )

    @property
    def description(self) -> str:
        levels = ",".join(str(c) for c in self.concurrency)
        return (
            f"{self.name}: concurrency {levels} · {self.requests_per_level} requests each"
            f" · {self.input_len} in / {self.output_len} out tokens"
        )


PROFILES: tuple[LoadProfile, ...] = (
    LoadProfile("smoke", (1, 2), 4, 32, 16),
    LoadProfile("sweep", (1, 2, 4, 8, 16), 32, 256, 128),
    LoadProfile("seed-h100", (1, 2, 4, 8, 16, 32, 64), 128, 512, 256),
)


def profile(name: str) -> LoadProfile:
    for p in PROFILES:
        if p.name == name:
            return p
    raise KeyError(f"no load profile {name!r}; known: {', '.join(p.name for p in PROFILES)}")


LoadFrom = Literal["node", "here"]
"""Where a run's load is generated: on the engine's node by its agent, or here."""
LOAD_FROM: tuple[tuple[str, LoadFrom], ...] = (
    ("from the node", "node"),
    ("from here, through the agent", "here"),
)
"""The choices the Load screen offers, the default first."""


@dataclass(frozen=True, slots=True)
class LoadRequest:
    """What the operator picked: one engine (as the fleet shows it) and a profile."""

    node: str
    engine_id: str
    engine_kind: str
    url: str
    model: str
    profile: LoadProfile
    simulated: bool = False
    gpu_ids: tuple[int, ...] = ()
    """The engine's GPUs: the store reads their energy over the run for tok/J."""
    api_key: str | None = field(default=None, repr=False)
    path: RunPath = "direct"
    load_from: LoadFrom = "node"
    agent_url: str | None = None
    """The engine's agent (``resolve_target``): a run from the node is started there."""
    agent_token: str | None = field(default=None, repr=False)
    engine: Mapping[str, object] = field(default_factory=dict)
    """The engine's start options and KV check (``agents.protocol.engine_facts``)."""
    load_nodes: tuple[str, ...] = ()
    """Nodes whose agents share the load, each running the profile (a distributed run,
    ``control.distributed``); empty: one place, as ``load_from`` says."""
    handles: Mapping[str, NodeHandle] = field(default_factory=dict, repr=False, compare=False)
    """The engine's node and the load nodes as this machine reaches them (``share_with``)."""


LoadRunner = Callable[[LoadRequest, RunEventSink], AsyncGenerator[ProgressEvent, None]]
"""Runs one load test, yielding its progress events and handing every event to the
recorder (the app's ``Services.load_runner``)."""


def run_load(request: LoadRequest, record: RunEventSink) -> AsyncGenerator[ProgressEvent, None]:
    """Progress events of the run; the last is ``RunFinished``, ``RunFailed`` or
    ``RunInterrupted``.  ``record`` gets every event, finished requests included,
    also after the caller stops iterating (the run's cut requests)."""
    if request.load_nodes:
        return _run_distributed(request, record)
    if request.load_from == "node":
        return _run_on_node(request, record)
    from loadgen.runner import Target
    from loadgen.setup import describe_run
    from loadgen.subproc import run_load_in_subprocess

    p = request.profile
    spec, workload = p.spec(), p.workload()
    target = Target(
        request.url,
        request.model,
        request.engine_kind,
        request.api_key,
        through_proxy=request.path == "proxied",
    )
    setup = describe_run(
        spec,
        workload,
        target,
        origin="tui",
        name=f"{request.engine_kind} {request.engine_id}",
        node=request.node,
        deployment_id=request.engine_id,
        gpu_ids=request.gpu_ids,
        simulated=request.simulated,
        path=request.path,
        engine=request.engine,
    )
    return run_load_in_subprocess(spec, workload, target, setup=setup, record=record)


async def _run_on_node(
    request: LoadRequest, record: RunEventSink
) -> AsyncGenerator[ProgressEvent, None]:
    """The run generated by the engine's agent, next to the engine (``run_on_node``)."""
    from agents.client import AgentClient
    from control.noderuns import run_on_node

    if request.agent_url is None or request.agent_token is None:
        failed = RunFailed(
            f"node {request.node} has no agent with a token here to run the load: "
            "choose to load it from here"
        )
        record.on_event(failed)
        yield failed
        return
    p = request.profile
    async with AgentClient(request.agent_url, request.agent_token) as client:
        events = run_on_node(
            client, request.engine_id, p.spec(), p.workload(), record,
            model=request.model, origin="tui", name=f"{request.engine_kind} {request.engine_id}",
        )  # fmt: skip
        async with contextlib.aclosing(events):  # closing it stops the run on the node
            async for event in events:
                yield event


def parse_load_nodes(text: str, known: Collection[str]) -> tuple[str, ...]:
    """The load nodes an operator typed (``a,b``; blank: none), each once and in the fleet;
    ValueError in words otherwise."""
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(
            f"no node {', '.join(unknown)} in the fleet (nodes: {', '.join(sorted(known))})"
        )
    if len(set(names)) != len(names):
        raise ValueError(f"name each load node once: {', '.join(names)}")
    return names


def share_with(request: LoadRequest, node: Callable[[str], NodeHandle | None]) -> LoadRequest:
    """``request`` with the handles of its engine's node and its load nodes (``node``
    finds one by name): a distributed run reaches their agents over these links."""
    found = {n: h for n in (request.node, *request.load_nodes) if (h := node(n)) is not None}
    return replace(request, handles=found)


async def _run_distributed(
    request: LoadRequest, record: RunEventSink
) -> AsyncGenerator[ProgressEvent, None]:
    """The run split over the load nodes' agents (``run_distributed``), each running the
    profile's levels; a load node over ssh reaches the engine's agent back through ssh."""
    from control.distributed import AgentRef, run_distributed, share_ref, unreachable

    handles = request.handles
    names = (request.node, *request.load_nodes)
    absent = [n for n in names if n not in handles or handles[n].token is None]
    why = (
        f"no agent with a token here for node {', '.join(absent)}: pick nodes of the fleet"
        if absent
        else unreachable(
            (request.node, handles[request.node].tunnel is not None),
            [(n, handles[n].tunnel is not None) for n in request.load_nodes],
        )
    )
    if why is not None:
        failed = RunFailed(why)
        record.on_event(failed)
        yield failed
        return
    refs = {n: AgentRef(n, handles[n].url, str(handles[n].token)) for n in names}
    engine = refs[request.node]
    p = request.profile.spread(len(request.load_nodes))
    async with contextlib.AsyncExitStack() as stack:
        shares = [
            await share_ref(stack, refs[n], handles[n].tunnel, engine)
            if n != request.node
            else engine
            for n in request.load_nodes
        ]
        events = run_distributed(
            engine, request.engine_id, shares, p.spec(), p.workload(), record,
            model=request.model, origin="tui", name=f"{request.engine_kind} {request.engine_id}",
        )  # fmt: skip
        async with contextlib.aclosing(events):  # closing it stops every share on its node
            async for event in events:
                yield event


def path_label(setup: RunSetup) -> str:
    """Where the run's load came from and how it reached the engine, in words."""
    engine = f"engine on {setup.node}" if setup.node else "engine"
    if setup.path == "node-local":
        return f"load from {setup.load_node}, next to its engine (node-local)"
    if setup.path == "proxied":
        return f"load from {setup.load_node} → {engine}, through its agent's proxy (proxied)"
    if setup.path == "distributed":
        ways = ", ".join(f"{share.node} {share.path}" for share in setup.load_nodes)
        return f"load from {setup.load_node} → {engine} (distributed: {ways})"
    at = f" at {setup.url}" if setup.url else ""
    return f"load from {setup.load_node} → {engine}{at} (direct)"


async def resolve_target(handle: NodeHandle | None, request: LoadRequest) -> LoadRequest:
    """The way to the engine (``engine_route``), its GPUs and the model name it serves:
    the agent's deployment record on ``handle`` (the request's node) first, else the
    engine's own ``/v1/models`` (engines refuse a name they do not serve); simulated when
    the agent or the engine's answer says so."""
    if handle is not None:
        tunnelled = handle.tunnel is not None
        route = engine_route(
            handle.url, handle.token, request.engine_id, request.url, tunnelled=tunnelled
        )
        request = replace(
            request,
            url=route.url,
            api_key=route.api_key,
            path=route.path,
            agent_url=handle.url,
            agent_token=handle.token,
        )
    probe = await probe_engine(request.url, request.api_key)
    request = replace(request, simulated=request.simulated or probe.simulated)
    if handle is not None and handle.client is not None:
        try:
            infos = await handle.client.engines()
        except Exception:  # the run itself will report an unreachable agent
            infos = []
        for info in infos:
            if info.id == request.engine_id:
                request = replace(request, gpu_ids=tuple(info.gpu_ids), engine=engine_facts(info))
                model = info.config.get("model")
                if model:
                    return replace(request, model=str(model))
    return replace(request, model=probe.model) if probe.model else request


@dataclass(frozen=True, slots=True)
class EngineProbe:
    """What an engine's OpenAI ``/v1/models`` says about it."""

    model: str | None = None
    """The first model id it lists (None if it cannot say)."""
    simulated: bool = False
    """It is infer-top's simulator (``sim.labels``): its runs are stored as simulated."""


async def probe_engine(
    base_url: str, api_key: str | None = None, timeout_s: float = 5.0
) -> EngineProbe:
    """Ask the engine's ``/v1/models``; an engine that does not answer tells nothing."""
    import aiohttp

    from sim.labels import is_simulated

    url = base_url.rstrip("/")
    url = url if url.endswith("/v1") else url + "/v1"
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else None
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s)) as s:
            async with s.get(f"{url}/models", headers=headers) as resp:
                if resp.status != 200:
                    return EngineProbe(simulated=is_simulated(headers=resp.headers))
                data: object = await resp.json(content_type=None)
                simulated = is_simulated(headers=resp.headers)
    except (aiohttp.ClientError, TimeoutError, ValueError):
        return EngineProbe()
    if not isinstance(data, dict):
        return EngineProbe(simulated=simulated)
    simulated = simulated or is_simulated(models=data)
    models = data.get("data")
    if isinstance(models, list) and models and isinstance(models[0], dict):
        model_id = models[0].get("id")
        return EngineProbe(str(model_id) if model_id else None, simulated)
    return EngineProbe(simulated=simulated)
