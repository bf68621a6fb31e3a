"""Agent test fixtures: a real agent app on a loopback port, replaying the H200 trace; for
the Docker tests, a node name, agent config and model-cache volume of the test's own."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from agents.client import AgentClient
from agents.config import AgentConfig
from agents.embedded import embedded_agent

TOKEN = "test-token-0123456789abcdef"


# --- GPU processes the replay lists (NVML's per-process account) ---

GIB = 2**30
NO_INSTANCE = 2**32 - 1


def write_processes(path: Path, compute: Mapping[int, int]) -> None:
    """GPU 0's compute contexts (pid -> bytes) as NVML's nvmlProcessInfo_v3_t fields;
    replaced whole, as the replay reads it while it runs."""
    entries = [
        {"pid": pid, "usedGpuMemory": used, "gpuInstanceId": NO_INSTANCE,
         "computeInstanceId": NO_INSTANCE}
        for pid, used in compute.items()
    ]  # fmt: skip
    data = {"about": "written by the test", "gpus": [{"compute": entries, "graphics": []}]}
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


@pytest.fixture
def processes(tmp_path: Path) -> Path:
    path = tmp_path / "processes.json"
    write_processes(path, {})
    return path


@pytest.fixture
def bystander() -> Iterator[int]:
    """A process of the test's own, which no engine owns."""
    proc = subprocess.Popen(["sleep", "120"])
    try:
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()


@pytest.fixture
def make_config(tmp_path: Path) -> Callable[..., AgentConfig]:
    def make(**overrides: Any) -> AgentConfig:
        values: dict[str, Any] = {
            "token": TOKEN,
            "platform": "replay",
            "port": 0,
            "interval_s": 0.2,
            "state_dir": tmp_path / "state",
            "node_name": "testnode",
            "adopt_on_start": False,
        }
        values.update(overrides)
        return AgentConfig(**values)

    return make


@pytest.fixture
async def agent(make_config: Callable[..., AgentConfig]) -> AsyncIterator[tuple[str, AgentClient]]:
    """A replay agent on 127.0.0.1:<free> with the sim runtime; yields (url, client)."""
    async with embedded_agent(make_config()) as (url, token), AgentClient(url, token) as client:
        yield url, client


# --- the real Docker daemon and the rig's llama-server image (marker docker) ---


def containers(node: str) -> list[str]:
    out = subprocess.run(
        ["docker", "ps", "-a", "-q", "--filter", f"label=org.infer-top.node={node}"],
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.split()


@pytest.fixture
def node(rig: object) -> Iterator[str]:
    """A node name of this test only; whatever it left running is removed afterwards."""
    name = f"itest{uuid.uuid4().hex[:8]}"
    yield name
    leftovers = containers(name)
    if leftovers:
        subprocess.run(["docker", "rm", "-f", "-v", *leftovers], capture_output=True)


@pytest.fixture
def docker_config(
    make_config: Callable[..., AgentConfig], rig: object, node: str, tmp_path: Path
) -> AgentConfig:
    return make_config(
        node_name=node,
        interval_s=0.5,
        allowed_engines=frozenset({"llamacpp"}),
        allowed_images=frozenset({rig.llama_image}),  # type: ignore[attr-defined]
        adopt_on_start=True,
        state_dir=tmp_path / "state",
    )


def llama(rig: object, slots: int) -> dict:
    return {
        "model": "/models/tiny.gguf",
        "image": rig.llama_image,  # type: ignore[attr-defined]
        "max_num_seqs": slots,
        "context_len": 256,
    }


@pytest.fixture
def cache_volume(node: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The llama.cpp model-cache volume under a name of this test only (the agent runs in
    this process: Compose reads MODEL_CACHE_VOLUME from its environment); afterwards the
    test's containers go, then the volume, whatever the test left."""
    name = f"itest-cache-{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv("MODEL_CACHE_VOLUME", name)
    try:
        yield name
    finally:
        if leftovers := containers(node):
            subprocess.run(["docker", "rm", "-f", *leftovers], capture_output=True)
        for volume in (name, f"{name}-bystander"):
            subprocess.run(["docker", "volume", "rm", "-f", volume], capture_output=True)


def docker(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=60)


async def volume_exists(name: str) -> bool:
    return (await asyncio.to_thread(docker, "volume", "inspect", name)).returncode == 0
