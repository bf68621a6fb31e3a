"""The rig's two real engines behind one real agent process, in one scenario per test
session: vLLM's CPU build takes about a minute to start on 2 cores, so it starts only
the twice that prefix caching off and on need.

The scenario, all through the agent's API with its Compose runtime: llama.cpp starts
and runs the sweep; a swap replaces it with vLLM (a small KV budget: 20 blocks of 32
tokens, prefix caching off), which runs the same sweep and then a shared-prefix load
while the test reads the agent's telemetry stream; a swap restarts vLLM with prefix
caching on for the same shared-prefix load, watched the same way; a swap brings
llama.cpp back.  The tests then check what the scenario saw.

Caching off comes first because vLLM's prefix-cache counters count from the engine's
start: the "on" engine runs the shared-prefix load alone, so its hit rate is that
load's, and the "off" engine shows that neither the sweep nor the load looked up any.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from agents.client import AgentClient
from agents.protocol import AgentEvent, EngineInfo
from control.noderuns import run_on_node
from engines.dialects.prom import parse_prometheus
from loadgen.profiles import LoadSpec, concurrency_sweep
from loadgen.workload import Workload
from runs.events import RunFinished
from store import RunRecorder, open_store
from telemetry import EngineTelemetry, TelemetryFrame
from tests.conftest import Rig
from tests.ports import free_port
from tests.waiting import apoll_until, poll_until

TOKEN = "rig-token-0123456789abcdef"
KV_BLOCKS = 20
"""vLLM's KV cache in blocks of 32 tokens: 640 tokens, so 8 streams of ~150 tokens each
fill it, queue and get preempted (the recipe saw KV 0.74-0.95, 2-6 waiting)."""
SWEEP = LoadSpec(
    levels=concurrency_sweep([2, 8]), requests_per_level=8, min_requests_per_client=3, seed=7
)
"""At 8 streams each sends 3 requests: vLLM stays saturated for several seconds, so the
agent's frames (4 a second) catch the full cache and the queue more than once."""
WORKLOAD = Workload(input_len=24, output_len=96, seed=7)
"""Prompt + answer stay well inside --max-model-len 512 even where the tiny tokenizer
spends several tokens per word."""
PREFIX_LOAD = LoadSpec(levels=concurrency_sweep([1]), requests_per_level=4, seed=7)
"""One stream: each request finds the blocks the one before it left in the cache."""
PREFIX_WORKLOAD = Workload(input_len=8, output_len=16, shared_prefix_len=230, seed=7)
"""A 230-token prefix (prompts are sized by vLLM's own /tokenize), after the chat
template's few head tokens: 7 full blocks of 32 every request shares (vLLM caches whole
blocks only), ~245-token prompts and 16 answer tokens: 9 of the 20 blocks, well inside
--max-model-len 512."""


def llama_config(rig: Rig) -> dict[str, Any]:
    return {"model": "/models/tiny.gguf", "image": rig.llama_image, "max_num_seqs": 4,
            "context_len": 512}  # fmt: skip


def vllm_config(rig: Rig, *, prefix_caching: bool) -> dict[str, Any]:
    return {
        "model": "/models/tiny",
        "image": rig.vllm_image,
        "context_len": 512,
        "max_num_seqs": 16,
        "prefix_caching": prefix_caching,
        "extra_args": ["--num-gpu-blocks-override", str(KV_BLOCKS)],
    }


@dataclass(frozen=True)
class Swap:
    engine: EngineInfo
    """The deployment the swap answered with."""
    wall_s: float
    """How long the swap request took, seen from the client."""


@dataclass(frozen=True)
class PrefixCounters:
    """vLLM's own prefix-cache counters after a shared-prefix load (its /metrics)."""

    hits_tokens: float | None
    queries_tokens: float | None
    enabled: str | None
    """``enable_prefix_caching`` as vllm:cache_config_info states it ("True"/"False")."""


@dataclass(frozen=True)
class Scenario:
    node: str
    llama_run_id: str
    vllm_run_id: str
    """The sweep on vLLM (prefix caching off)."""
    prefix_off_run_id: str
    prefix_on_run_id: str
    db: Path
    to_vllm: Swap
    to_vllm_cached: Swap
    """vLLM restarted with prefix caching on."""
    to_llama: Swap
    vllm_node_frames: tuple[TelemetryFrame, ...]
    """The node's frames with prefix caching off (time stamped, only this engine in them),
    from before its sweep to after its shared-prefix load: what the alert rules read."""
    cached_frames: tuple[EngineTelemetry, ...]
    """vLLM's telemetry with prefix caching on, from before its shared-prefix load to
    after it."""
    off_counters: PrefixCounters
    on_counters: PrefixCounters
    events: tuple[AgentEvent, ...]

    @property
    def vllm_frames(self) -> tuple[EngineTelemetry, ...]:
        """vLLM's telemetry with prefix caching off, one per frame (``vllm_node_frames``)."""
        return tuple(f.engines[0] for f in self.vllm_node_frames)

    def timeline(self) -> str:
        """vLLM's frames as lines (seconds from the first; KV fill, running, waiting,
        scrape error): what a failed assertion shows, whole, to say what the agent saw."""
        first = self.vllm_node_frames[0].ts if self.vllm_node_frames else 0.0
        return "\n".join(
            f"{f.ts - first:6.2f} s  kv {e.kv_cache_usage}  running {e.requests_running}  "
            f"waiting {e.requests_waiting}  {e.scrape_error or ''}"
            for f in self.vllm_node_frames
            for e in f.engines
        )


@dataclass(frozen=True)
class AgentProcess:
    url: str
    node: str
    state_dir: Path


def node_containers(node: str) -> list[str]:
    out = subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"label=org.infer-top.node={node}"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return out.stdout.split()


@contextlib.contextmanager
def agent_process(rig: Rig, workdir: Path) -> Iterator[AgentProcess]:
    """``infer-agent`` as operators run it, allowed the rig's two images; whatever it
    started is stopped through it, and any container left of its node removed."""
    node = f"rig{uuid.uuid4().hex[:8]}"
    token_file = workdir / "token"
    token_file.write_text(TOKEN)
    token_file.chmod(0o600)
    port = free_port()
    log = (workdir / "agent.log").open("wb")
    argv = [
        sys.executable, "-m", "agents.cli", "--listen", f"127.0.0.1:{port}",
        "--token-file", str(token_file), "--state-dir", str(workdir / "state"),
        "--node-name", node, "--interval", "250ms", "--health-interval", "2s",
        "--allow-engine", "llamacpp", "--allow-engine", "vllm",
        "--allow-image", rig.llama_image, "--allow-image", rig.vllm_image,
    ]  # fmt: skip
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ))
    url = f"http://127.0.0.1:{port}"
    try:
        poll_until(
            lambda: _answers(url), "the agent to listen", timeout_s=60, every_s=0.2,
            ignoring=(OSError,),
        )  # fmt: skip
        yield AgentProcess(url, node, workdir / "state")
    finally:
        with contextlib.suppress(Exception):
            asyncio.run(_stop_all(url))
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)
        log.close()
        if leftovers := node_containers(node):
            subprocess.run(["docker", "rm", "-f", *leftovers], capture_output=True, timeout=120)


def _answers(url: str) -> bool:
    import urllib.request

    with urllib.request.urlopen(f"{url}/healthz", timeout=2) as resp:
        return bool(resp.status == 200)


async def _stop_all(url: str) -> None:
    async with AgentClient(url, TOKEN) as client:
        for engine in await client.engines():
            await client.stop(engine.id)


async def served_model(client: AgentClient, engine_id: str) -> str:
    """The model id the engine serves, asked through the agent's proxy."""
    async with (
        aiohttp.ClientSession() as http,
        http.get(
            f"{client.base_url}/v1/engines/{engine_id}/proxy/v1/models",
            headers={"Authorization": f"Bearer {TOKEN}"},
        ) as resp,
    ):
        return str((await resp.json())["data"][0]["id"])


async def prefix_counters(client: AgentClient, engine_id: str) -> PrefixCounters:
    """The engine's prefix-cache counters and setting, read through the agent's proxy."""
    async with (
        aiohttp.ClientSession() as http,
        http.get(
            f"{client.base_url}/v1/engines/{engine_id}/proxy/metrics",
            headers={"Authorization": f"Bearer {TOKEN}"},
        ) as resp,
    ):
        page = await resp.text()
    table = parse_prometheus(page, what="vLLM metrics")
    enabled = re.search(r'^vllm:cache_config_info\{[^}]*enable_prefix_caching="(\w+)"', page, re.M)
    return PrefixCounters(
        hits_tokens=table.total(("vllm:prefix_cache_hits_total",)),
        queries_tokens=table.total(("vllm:prefix_cache_queries_total",)),
        enabled=enabled[1] if enabled else None,
    )


async def run_load(
    client: AgentClient,
    engine_id: str,
    db_store: Any,
    spec: LoadSpec = SWEEP,
    workload: Workload = WORKLOAD,
) -> str:
    """A load (the sweep unless told), generated on the node, recorded into the store;
    the run's id."""
    recorder = RunRecorder(db_store)
    model = await served_model(client, engine_id)
    events = run_on_node(client, engine_id, spec, workload, recorder, model=model, origin="bench")
    last = None
    async with contextlib.aclosing(events):
        async for event in events:
            last = event
    assert isinstance(last, RunFinished), f"the sweep on {engine_id} ended with {last}"
    assert recorder.run_id is not None and recorder.status == "completed", recorder.reason
    return recorder.run_id


async def swap(client: AgentClient, engine_id: str, kind: str, config: dict[str, Any]) -> Swap:
    began = time.monotonic()
    engine = await client.swap(engine_id, config, kind=kind)
    return Swap(engine, time.monotonic() - began)


async def watch(
    client: AgentClient,
    engine_id: str,
    into: list[EngineTelemetry],
    whole: list[TelemetryFrame],
) -> None:
    async for frame in client.stream():
        mine = tuple(e for e in frame.engines if e.id == engine_id)
        into.extend(mine)
        if mine:
            whole.append(dataclasses.replace(frame, engines=mine))


@contextlib.asynccontextmanager
async def watching(
    client: AgentClient, engine_id: str, whole: list[TelemetryFrame] | None = None
) -> AsyncIterator[list[EngineTelemetry]]:
    """The engine's telemetry, frame by frame, from its first scrape (so the load starts
    on an engine seen idle) until a frame sampled after the body shows it idle again;
    ``whole`` gets the node's frames themselves (time stamped, with only this engine)."""
    frames: list[EngineTelemetry] = []
    node_frames: list[TelemetryFrame] = [] if whole is None else whole
    watcher = asyncio.create_task(watch(client, engine_id, frames, node_frames))
    try:
        await apoll_until(
            lambda: frames[-1] if frames else None,
            "the engine's first scraped frame",
            done=lambda e: e is not None and e.kv_cache_usage is not None,
            timeout_s=30,
        )
        yield frames
        # the engine's own view once the load is over: nothing left running, in a frame
        # sampled after the body returned (an earlier frame may predate the last request,
        # and its counters with it, on a busy machine)
        body_done = time.time()
        await apoll_until(
            lambda: node_frames[-1] if node_frames else None,
            "a frame sampled after the load with the engine idle",
            done=lambda f: (
                f is not None and f.ts > body_done and f.engines[0].requests_running == 0
            ),
            timeout_s=30,
        )
    finally:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher


async def run_scenario(agent: AgentProcess, rig: Rig, db: Path) -> Scenario:
    store = open_store(db)
    try:
        async with AgentClient(agent.url, TOKEN) as client:
            llama = await client.start("llamacpp", llama_config(rig))
            assert llama.health == "healthy", llama.message
            llama_run = await run_load(client, llama.id, store)

            config = vllm_config(rig, prefix_caching=False)
            to_vllm = await swap(client, llama.id, "vllm", config)
            assert to_vllm.engine.health == "healthy", to_vllm.engine.message
            node_frames: list[TelemetryFrame] = []
            async with watching(client, llama.id, node_frames):
                vllm_run = await run_load(client, llama.id, store)
                prefix_off_run = await run_load(
                    client, llama.id, store, PREFIX_LOAD, PREFIX_WORKLOAD
                )
            off_counters = await prefix_counters(client, llama.id)

            config = vllm_config(rig, prefix_caching=True)
            to_vllm_cached = await swap(client, llama.id, "vllm", config)
            assert to_vllm_cached.engine.health == "healthy", to_vllm_cached.engine.message
            async with watching(client, llama.id) as cached_frames:
                prefix_on_run = await run_load(
                    client, llama.id, store, PREFIX_LOAD, PREFIX_WORKLOAD
                )
            on_counters = await prefix_counters(client, llama.id)

            to_llama = await swap(client, llama.id, "llamacpp", llama_config(rig))
            assert to_llama.engine.health == "healthy", to_llama.engine.message
            events = await client.recent_events()
    finally:
        store.close()
    return Scenario(
        node=agent.node,
        llama_run_id=llama_run,
        vllm_run_id=vllm_run,
        prefix_off_run_id=prefix_off_run,
        prefix_on_run_id=prefix_on_run,
        db=db,
        to_vllm=to_vllm,
        to_vllm_cached=to_vllm_cached,
        to_llama=to_llama,
        vllm_node_frames=tuple(node_frames),
        cached_frames=tuple(cached_frames),
        off_counters=off_counters,
        on_counters=on_counters,
        events=tuple(events),
    )


@pytest.fixture(scope="session")
def scenario(rig: Rig, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scenario]:
    workdir = tmp_path_factory.mktemp("rig-scenario")
    with agent_process(rig, workdir) as agent:
        try:
            seen = asyncio.run(run_scenario(agent, rig, workdir / "runs.db"))
        except Exception:
            # the agent's side of what went wrong (the engines' log lines are in it)
            print((workdir / "agent.log").read_text(errors="replace")[-6000:], file=sys.stderr)
            raise
        yield seen
