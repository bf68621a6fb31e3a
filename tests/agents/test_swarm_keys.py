"""A keyed engine under Swarm: the node's agent, which finds a task by its labels (never
holding the key), reads the engine's API key from the task container's environment, in
the variable the engine's spec names, so it can reach the engine with it.  Real Docker:
a container labelled as a Swarm task (the rig's image, sleeping) stands in for one."""

from __future__ import annotations

import asyncio
import subprocess
import threading
import uuid
from pathlib import Path

import pytest

from agents.runtime import Deployment, RuntimeError_
from agents.runtime.state import StateStore
from agents.runtime.swarm import SwarmRuntime
from tests.conftest import Rig
from tests.waiting import poll_until

pytestmark = pytest.mark.docker

KEY = "sk-swarm-task-key"


def test_a_nodes_agent_reads_a_tasks_api_key_from_its_container(
    rig: Rig, node: str, tmp_path: Path
) -> None:
    dep_id = f"key{uuid.uuid4().hex[:8]}"
    labels = {
        "org.infer-top.node": node,  # the `node` fixture removes it whatever happens
        "org.infer-top.runtime": "swarm",
        "org.infer-top.deployment": dep_id,
        "org.infer-top.engine": "llamacpp",
        "org.infer-top.port": "18124",
        "org.infer-top.config": '{"model": "/models/tiny.gguf", "port": 18124}',
    }
    swarm = SwarmRuntime(node=node, platform="cpu", state=StateStore(tmp_path))
    started: list[Deployment] = []
    lock = threading.Lock()

    def on_task(action: str, dep: Deployment, reason: str, at: float, code: int | None) -> None:
        if action == "start" and dep.id == dep_id:
            with lock:
                started.append(dep)

    unwatch = swarm.watch_tasks(on_task)
    assert unwatch is not None, "the rig's Docker answers"
    try:
        argv = ["docker", "run", "-d", "--network", "none", "--entrypoint", "sleep"]
        argv += [f"--label={k}={v}" for k, v in labels.items()]
        argv += ["-e", f"LLAMA_API_KEY={KEY}", rig.llama_image, "120"]
        subprocess.run(argv, check=True, capture_output=True, timeout=60)

        def seen() -> list[Deployment]:
            with lock:
                return list(started)

        # The task as Docker's start event brings it to the agent: with its key.
        [task] = poll_until(seen, f"the start of task {dep_id}", timeout_s=60)
        assert task.config["api_key"] == KEY
        assert task.info().config["api_key"] == "<redacted>"  # never shown
        # And as an agent started later finds it running.
        [adopted] = [d for d in asyncio.run(swarm.adopt()) if d.id == dep_id]
        assert adopted.config["api_key"] == KEY
    finally:
        unwatch()


def test_a_key_the_engine_takes_as_a_flag_only_is_refused_on_swarm(tmp_path: Path) -> None:
    """SGLang reads its key from a flag, which a node's agent cannot read back: refused
    before anything is deployed, saying how to run it."""
    swarm = SwarmRuntime(node="a", platform="nvidia", state=StateStore(tmp_path))
    dep = Deployment(
        id="sk1", kind="sglang", runtime="swarm", port=18000,
        config={"model": "m/m", "port": 18000, "api_key": "sk-x"},
    )  # fmt: skip
    with pytest.raises(RuntimeError_, match="compose runtime"):
        swarm.check(dep)
    dep.config.pop("api_key")
    swarm.check(dep)  # without a key it deploys
