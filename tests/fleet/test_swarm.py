"""Engines on a two-node Docker Swarm: nodes ``a`` (manager) and ``b`` (worker), each a
network namespace with its own dockerd and agent.  The rig's llama-server is deployed as a
Swarm service through a's agent and lands where its placement says; the agent of the node
that runs the task lists it, serves a node-side load test from it, follows Swarm's
restart of a killed task and the move of a drained one; it scales to a replica per node,
serves a load test over both replicas (one share per node, each on its own replica) and
a swap replaces both;
a stop through the manager's agent removes the service and keeps the model cache."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import aiohttp
import pytest

from agents.client import AgentClient, AgentError
from agents.protocol import EngineInfo, ServiceInfo
from control.config import load_config
from control.wiring import build_services
from loadgen.stats import percentiles
from store import open_store
from tests.conftest import Rig
from tests.fleet.conftest import write_config
from tests.fleet.test_engine_cli import engine_cli, json_of
from tests.loadgen.conftest import bench
from tests.netns import PROBE, TestNode, network_nodes
from tests.netns_docker import NodeDocker, load_image
from tests.tui.conftest import SIZE
from tests.tui.driving import run_smoke_load
from tests.tui.helpers import text_of, wait_until
from tests.waiting import apoll_until
from tui.app import create_app

pytestmark = [pytest.mark.netns, pytest.mark.docker]

POOL = "infer-top.pool"
"""The node label the engine is placed by (b has it first; a gets it before b drains)."""
API_KEY = "sk-swarm-rig"
"""The engine's own key: the agent of the node running a replica reads it from the task."""
GENERATED = "llamacpp:tokens_predicted_total"
"""llama.cpp's count of the tokens it generated (its /metrics)."""
REPLICA_REQUESTS = 8
SETTLE_S = 90.0
"""Bound on one step of Swarm's (a task started, restarted or moved, and healthy)."""


def docker_of(node: TestNode) -> NodeDocker:
    assert node.docker is not None
    return node.docker


@pytest.fixture(scope="module")
def swarm(rig: Rig, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, TestNode]]:
    """Both daemons started once for the module, the rig's image loaded into each, a
    manager on a and b joined as a worker."""
    workdir = tmp_path_factory.mktemp("swarm")
    with network_nodes(("a", "b"), workdir, natives={}, dockerd=True) as nodes:
        a, b = docker_of(nodes["a"]), docker_of(nodes["b"])
        load_image(rig.llama_image, (a, b))
        address = nodes["a"].address
        a.cli("swarm", "init", "--advertise-addr", address, "--listen-addr", f"{address}:2377")
        token = a.cli("swarm", "join-token", "-q", "worker")
        b.cli("swarm", "join", "--token", token, "--advertise-addr", nodes["b"].address,
              f"{address}:2377")  # fmt: skip
        yield nodes


async def listed(node: TestNode, engine_id: str) -> EngineInfo | None:
    async with AgentClient(node.agent_url, node.token) as client:
        return next((e for e in await client.engines() if e.id == engine_id), None)


async def healthy_on(node: TestNode, engine_id: str, after: float = 0.0) -> EngineInfo:
    """The engine as ``node``'s agent lists it once healthy (started after ``after``)."""

    async def healthy() -> EngineInfo | bool:
        found = await listed(node, engine_id)
        ok = found is not None and found.health == "healthy" and found.started_at > after
        return found if ok and found is not None else False

    found = await apoll_until(
        healthy, f"engine {engine_id} healthy on node {node.name}", timeout_s=SETTLE_S, every_s=0.5
    )
    assert isinstance(found, EngineInfo)
    return found


async def in_frame(node: TestNode, engine_id: str) -> bool:
    """The node's telemetry frame (what the fleet screen draws) carries the engine."""
    async with AgentClient(node.agent_url, node.token) as client:
        frame = await client.snapshot()
    return frame.node == node.name and engine_id in [e.id for e in frame.engines]


async def framed_by(node: TestNode, engine_id: str) -> None:
    await apoll_until(
        lambda: in_frame(node, engine_id),
        f"engine {engine_id} in node {node.name}'s telemetry",
        timeout_s=SETTLE_S,
        every_s=0.5,
    )


async def events_of(node: TestNode, engine_id: str) -> list[str]:
    """The kinds of the engine's events in ``node``'s agent's backlog, oldest first."""
    headers = {"Authorization": f"Bearer {node.token}"}
    async with aiohttp.ClientSession(headers=headers) as session:
        async with session.get(f"{node.agent_url}/v1/events") as resp:
            assert resp.status == 200
            events = (await resp.json())["events"]
    return [str(e["kind"]) for e in events if e["engine_id"] == engine_id]


async def dropped_by(node: TestNode, engine_id: str) -> None:
    async def gone() -> bool:
        return await listed(node, engine_id) is None

    await apoll_until(
        gone, f"node {node.name} to drop engine {engine_id}", timeout_s=SETTLE_S, every_s=0.5
    )


async def service_on(manager: TestNode, engine_id: str, nodes: tuple[str, ...]) -> ServiceInfo:
    """The service as the deploying (manager) node's agent lists it, once its running
    replicas are on ``nodes``."""

    async def placed() -> ServiceInfo | bool:
        async with AgentClient(manager.agent_url, manager.token) as client:
            _, services = await client.listing()
        found = next((s for s in services if s.id == engine_id), None)
        return found if found is not None and found.nodes == nodes else False

    found = await apoll_until(
        placed, f"service {engine_id} running on {nodes}", timeout_s=SETTLE_S, every_s=0.5
    )
    assert isinstance(found, ServiceInfo)
    return found


def answers_on_loopback(node: TestNode, port: int) -> bool:
    """Asked from inside the node: its own loopback."""
    probe = node.run("python3", "-c", PROBE, f"http://127.0.0.1:{port}/health", check=False)
    return probe.returncode == 0


def task_containers(node: TestNode, engine_id: str) -> list[str]:
    return (
        docker_of(node)
        .cli("ps", "-q", "--filter", f"label=org.infer-top.deployment={engine_id}")
        .split()
    )


def predicted_tokens(node: TestNode, port: int) -> float:
    """The tokens the replica on ``node`` generated so far (llama.cpp's own counter, asked
    on the node's loopback with the engine's key)."""
    ask = (
        "import sys, urllib.request as u; r = u.Request(sys.argv[1], headers={'Authorization': "
        "'Bearer ' + sys.argv[2]}); print(u.urlopen(r, timeout=5).read().decode())"
    )
    text = node.run("python3", "-c", ask, f"http://127.0.0.1:{port}/metrics", API_KEY).stdout
    [value] = [line.split()[-1] for line in text.splitlines() if line.startswith(GENERATED + " ")]
    return float(value)


async def load_over_replicas(
    nodes: tuple[TestNode, ...], engine_id: str, port: int, config: Path, db: Path
) -> None:
    """``bench --all-replicas`` through the manager (the first node): one merged run of
    REPLICA_REQUESTS requests, each node's share sent by its agent to its own replica."""
    before = {node.name: predicted_tokens(node, port) for node in nodes}
    code, _out, err = await bench(
        "--config", str(config), "--node", nodes[0].name, "--engine-id", engine_id,
        "--all-replicas", "--concurrency", "2", "--requests", str(REPLICA_REQUESTS),
        "--input-len", "16", "--output-len", "8", "--save", "--db", str(db),
        timeout_s=300,  # a bound on a hang, as the node-side run's
    )  # fmt: skip
    assert code == 0, err
    with open_store(db) as store:
        [run] = store.list_runs()
        records = list(store.iter_requests(run.run_id))
        [level] = [row.summary for row in store.levels(run.run_id)]
    assert run.status == "completed", run.status_reason
    assert len(records) == REPLICA_REQUESTS and all(r.ok for r in records), records
    # Each node sent its half, every request to the replica on that node.
    half = REPLICA_REQUESTS // 2
    assert sorted((str(r.load_node), str(r.engine_node)) for r in records) == (
        [("a", "a")] * half + [("b", "b")] * half
    )
    placement = run.profile["placement"]
    assert (placement["engine_node"], placement["load_node"]) == ("a,b", "a,b")
    assert {s["node"]: s["path"] for s in placement["load_nodes"]} == {
        "a": "node-local",
        "b": "node-local",
    }
    # The merged percentiles are those of every stored record.
    assert level.concurrency == 2 and level.completed == REPLICA_REQUESTS
    raw = percentiles(r.ttft_s for r in records if r.ttft_s is not None)
    assert (level.ttft_s.p50, level.ttft_s.p99) == (raw.p50, raw.p99)
    # Each replica generated at least the tokens its node's records counted: no share
    # went to the other node's replica.
    for node in nodes:
        own = sum(r.output_tokens for r in records if r.engine_node == node.name)
        assert own > 0
        await apoll_until(
            lambda node=node, own=own: predicted_tokens(node, port) >= before[node.name] + own,
            f"node {node.name}'s replica to count the {own} tokens it generated",
            timeout_s=30,
            every_s=0.5,
        )


async def load_screen_over_replicas(
    nodes: dict[str, TestNode], engine_id: str, config_path: Path, db: Path
) -> None:
    """The Load screen's target "all replicas of ID": the smoke profile run by each
    replica's node against its own replica, one run in the store."""
    config = replace(load_config(config_path), db_path=db)
    async with build_services(config) as services:
        app = create_app(config, services=services)
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("4")
            key = f"replicas/{engine_id}"
            await wait_until(
                pilot, lambda: key in app.screen.target_keys, "the replicas as a target", 60
            )
            await run_smoke_load(pilot, key)
            path = text_of(pilot, "#load-path")
        assert services.store is not None
        [run] = services.store.list_runs()
        records = list(services.store.iter_requests(run.run_id))
    assert "load from a,b → replicas on a,b (distributed: a node-local, b node-local)" in path
    assert run.status == "completed", run.status_reason
    # The smoke profile (4 requests a level, 2 levels) on each of the two nodes.
    assert sorted((str(r.load_node), str(r.engine_node)) for r in records) == (
        [("a", "a")] * 8 + [("b", "b")] * 8
    )


async def test_engine_as_a_swarm_service_placed_restarted_moved_and_stopped(
    swarm: dict[str, TestNode], tmp_path: Path
) -> None:
    a, b = swarm["a"], swarm["b"]
    manager = docker_of(a)
    manager.cli("node", "update", "--label-add", f"{POOL}=rig", "b")
    config = write_config(tmp_path / "config.toml", swarm)
    done = engine_cli(
        "start", "llamacpp", "--node", "a", "--runtime", "swarm", "--place-label", f"{POOL}=rig",
        "--model", "/models/tiny.gguf", "--max-num-seqs", "2", "--context-len", "2048",
        "--set", f"api_key={API_KEY}", "--json", config=config,
    )  # fmt: skip
    deployed = json_of(done)["engine"]
    assert deployed["state"] == "deployed", deployed["message"]
    engine_id, port = str(deployed["id"]), int(deployed["port"])
    try:
        # Placed on b: b's agent lists it, it answers on b's loopback and not on a's.
        on_b = await healthy_on(b, engine_id)
        assert on_b.runtime == "swarm" and on_b.config["model"] == "/models/tiny.gguf"
        assert on_b.config["api_key"] == "<redacted>", "b's agent holds the engine's key"
        assert await listed(a, engine_id) is None
        await framed_by(b, engine_id)
        # The manager's agent lists the service it deployed: `engine ls` against a.
        service = await service_on(a, engine_id, ("b",))
        assert (service.state, service.replicas, service.running) == ("deployed", 1, 1)
        assert service.placement == f"node.labels.{POOL} == rig"
        shown = engine_cli("ls", "--node", "a", config=config)
        assert shown.returncode == 0, shown.stderr
        [row] = [line.split() for line in shown.stdout.splitlines() if engine_id in line]
        assert {"deployed", "1/1", "b", "/models/tiny.gguf"} <= set(row), shown.stdout
        assert not await in_frame(a, engine_id)
        assert answers_on_loopback(b, port) and not answers_on_loopback(a, port)

        # b is a worker: its agent reads the replica's logs, and says where to stop it.
        async with AgentClient(b.agent_url, b.token) as client:
            lines = [line async for line in client.logs(engine_id, tail=200)]
            assert any("loading model '/models/tiny.gguf'" in line for line in lines), lines[-5:]
            with pytest.raises(AgentError, match="not a Swarm manager"):
                await client.stop(engine_id)
        assert (await healthy_on(b, engine_id)).id == engine_id  # still running

        # A node-side load test through b's agent, which sends the keyed engine its key
        # (from the task's container); its records reach SQLite here.
        db = tmp_path / "runs.db"
        code, _out, err = await bench(
            "--config", str(config),
            "--node", "b", "--engine-id", engine_id, "--concurrency", "2", "--requests", "4",
            "--input-len", "16", "--output-len", "8", "--save", "--db", str(db),
            timeout_s=300,  # a bound on a hang: a busy 2-core box took 50 s
        )  # fmt: skip
        assert code == 0, err
        with sqlite3.connect(db) as conn:
            [(node, status)] = conn.execute("SELECT node, status FROM runs").fetchall()
            [(records, failed)] = conn.execute(
                "SELECT count(*), count(error_kind) FROM requests"
            ).fetchall()
        assert (node, status, records, failed) == ("b", "completed", 4, 0)

        # Killed: Swarm starts a new task on b, and b's agent shows the restart.
        [container] = task_containers(b, engine_id)
        before = len(await events_of(b, engine_id))
        killed_at = time.time()
        docker_of(b).cli("kill", container)
        await healthy_on(b, engine_id, after=killed_at)
        kinds = (await events_of(b, engine_id))[before:]
        assert "crashed" in kinds and "restarted" in kinds[kinds.index("crashed") :], kinds
        assert task_containers(b, engine_id) != [container]

        # Drained: the task moves to a (labelled now), whose agent lists it; b's drops it.
        manager.cli("node", "update", "--label-add", f"{POOL}=rig", "a")
        before = len(await events_of(b, engine_id))
        manager.cli("node", "update", "--availability", "drain", "b")
        await healthy_on(a, engine_id)
        await framed_by(a, engine_id)
        await dropped_by(b, engine_id)
        await service_on(a, engine_id, ("a",))
        assert answers_on_loopback(a, port) and not answers_on_loopback(b, port)
        # Swarm's stop is no crash: b says the task is gone.
        kinds = (await events_of(b, engine_id))[before:]
        assert "task_gone" in kinds and "crashed" not in kinds, kinds

        # Two replicas, one per node: both agents list theirs.
        manager.cli("node", "update", "--availability", "active", "b")
        json_of(engine_cli("scale", engine_id, "2", "--node", "a", "--json", config=config))
        await healthy_on(b, engine_id)
        await healthy_on(a, engine_id)
        scaled = await service_on(a, engine_id, ("a", "b"))
        assert (scaled.replicas, scaled.running) == (2, 2)

        # A load test over both replicas, through the manager that deployed the service:
        # each node's agent loads its own replica on its loopback; one run reaches SQLite.
        await load_over_replicas((a, b), engine_id, port, config, tmp_path / "replicas.db")
        await load_screen_over_replicas(swarm, engine_id, config, tmp_path / "tui.db")

        # A swap redeploys the service: Swarm replaces both replicas, both agents follow.
        swapped_at = time.time()
        done = engine_cli(
            "swap", engine_id, "--node", "a", "--model", "/models/tiny.gguf",
            "--max-num-seqs", "1", "--context-len", "1024", "--json", config=config,
        )  # fmt: skip
        assert json_of(done)["engine"]["state"] == "deployed", done.stderr
        for node in (a, b):
            replica = await healthy_on(node, engine_id, after=swapped_at)
            assert replica.config["max_num_seqs"] == 1, (node.name, replica.config)
    finally:
        async with AgentClient(a.agent_url, a.token) as client:
            stopped = await client.stop(engine_id)
    assert stopped.id == engine_id
    await dropped_by(a, engine_id)
    await dropped_by(b, engine_id)
    # The stack is gone; the model cache volume it mounted is not.
    assert manager.cli("stack", "ls", "--format", "{{.Name}}") == ""
    assert "infer-top-gguf" in manager.cli("volume", "ls", "--format", "{{.Name}}").split()
