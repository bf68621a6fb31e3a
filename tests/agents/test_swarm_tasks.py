"""How a node's agent follows the Swarm tasks its Docker reports (no daemon needed: the
runtime's task callback driven by hand): a crash is a crash, Swarm's own stop is not."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import aiohttp
import pytest

from agents.config import AgentConfig
from agents.manager import EngineManager
from agents.runtime.sim import SimRuntime
from agents.runtime.state import StateStore
from agents.runtime.swarm import SwarmRuntime, task_deployment

LABELS = {
    "org.infer-top.runtime": "swarm",
    "org.infer-top.deployment": "svc1",
    "org.infer-top.engine": "llamacpp",
    "org.infer-top.port": "18123",
    "org.infer-top.config": '{"model": "/models/tiny.gguf", "port": 18123}',
}


async def manager_with_task(config: AgentConfig, tmp_path: Path) -> EngineManager:
    swarm = SwarmRuntime(node="b", platform="cpu", state=StateStore(tmp_path))
    session = aiohttp.ClientSession()
    manager = EngineManager(config, {"swarm": swarm}, platform="cpu", session=session)
    task = task_deployment(LABELS)
    assert task is not None
    task.state, task.health, task.started_at = "ready", "healthy", 100.0
    manager.deployments[task.id] = task
    return manager


async def test_swarm_stopping_a_task_drops_it_without_a_crash(
    make_config: Callable[..., AgentConfig], tmp_path: Path
) -> None:
    manager = await manager_with_task(make_config(), tmp_path)
    try:
        task = task_deployment(LABELS)
        assert task is not None
        manager._task("ending", task, "Swarm is stopping task t.1", 200.0, None)
        manager._task("die", task, "task t.1 exited (code 0)", 200.1, 0)
        assert manager.deployments["svc1"].state == "stopping"
        manager._task("stop", task, "Swarm stopped task t.1 on node b", 200.2, None)
        assert "svc1" not in manager.deployments
        kinds = [e.kind for e in manager.events.backlog(0)]
        assert kinds == ["task_gone"]
    finally:
        await manager.session.close()


async def test_a_task_that_dies_on_its_own_is_a_crash(
    make_config: Callable[..., AgentConfig], tmp_path: Path
) -> None:
    manager = await manager_with_task(make_config(), tmp_path)
    try:
        task = task_deployment(LABELS)
        assert task is not None
        manager._task("die", task, "task t.1 exited (code 137)", 200.0, 137)
        dep = manager.deployments["svc1"]
        assert (dep.state, dep.health, dep.exit_code) == ("crashed", "dead", 137)
        assert [e.kind for e in manager.events.backlog(0)] == ["crashed"]
    finally:
        await manager.session.close()


async def test_a_deployed_service_is_listed_when_swarm_does_not_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The deploying agent lists its service from its record, and says that it could not
    count the replicas, rather than dropping it (or hanging) while Docker is away."""
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path / 'no-docker.sock'}")
    swarm = SwarmRuntime(node="a", platform="cpu", state=StateStore(tmp_path))
    dep = task_deployment(LABELS)
    assert dep is not None
    dep.config["api_key"] = "sk-secret"
    dep.options = {"placement": {"node": "b"}, "replicas": 2}
    swarm.state.save(dep)
    [service] = await swarm.services()
    assert (service.id, service.state, service.replicas, service.running) == (
        "svc1",
        "deployed",
        2,
        None,
    )
    assert service.placement == "node.hostname == b" and service.model == "/models/tiny.gguf"
    assert service.message is not None and "Swarm did not say" in service.message
    assert service.config["api_key"] == "<redacted>"


async def test_an_engine_stopped_or_gone_leaves_nothing_of_it_in_the_agent(
    make_config: Callable[..., AgentConfig], tmp_path: Path
) -> None:
    """The soak found a lock per engine ever started kept by the agent for good."""
    manager = await manager_with_task(make_config(), tmp_path)
    manager.runtimes["sim"] = SimRuntime()
    try:
        for _ in range(3):
            dep = await manager.start("sim", {"profile": "h100-llama2-7b-vllm"}, [0], runtime="sim")
            assert dep.state == "ready"
            await manager.stop(dep.id)
        task = task_deployment(LABELS)
        assert task is not None
        manager._task("stop", task, "Swarm stopped task t.1 on node b", 200.2, None)
        assert (manager.deployments, manager._locks) == ({}, {})
    finally:
        await manager.close()
        await manager.session.close()
