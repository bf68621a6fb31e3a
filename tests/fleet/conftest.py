"""The multi-host rig's fixtures: nodes ``a`` and ``b`` as network namespaces, each with
its own ``infer-agent`` process allowed to run the rig's real llama-server (tests/netns.py),
and a llama.cpp engine started on node ``b`` through its agent's API."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from agents.client import AgentClient
from agents.protocol import EngineInfo
from tests.conftest import Rig
from tests.netns import TestNode, network_nodes

ENGINE_KEY = "sk-engine-key-on-node-b"
"""The engine's own API key: only the agent's proxy (which swaps it in) knows it."""


@pytest.fixture(scope="module")
def fleet(rig: Rig, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, TestNode]]:
    workdir = tmp_path_factory.mktemp("fleet")
    model_dir = rig.tiny_model.resolve().parent
    natives = {"llamacpp": rig.llama_server_bin}
    with network_nodes(("a", "b"), workdir, natives=natives, model_dirs=(model_dir,)) as nodes:
        yield nodes


@pytest.fixture(scope="module")
def llama_on_b(fleet: dict[str, TestNode], rig: Rig) -> Iterator[EngineInfo]:
    """llama.cpp (process runtime) on node b, four slots of 8192 tokens (a long answer
    takes it tens of seconds), started from the root namespace."""
    b = fleet["b"]
    launch = {
        "model": rig.tiny_model.resolve().name,
        "max_num_seqs": 4,
        "context_len": 8192,
        "api_key": ENGINE_KEY,
        "extra_args": ["--threads=1"],
    }

    async def start() -> EngineInfo:
        async with AgentClient(b.agent_url, b.token) as client:
            return await client.start("llamacpp", launch, runtime="process")

    async def stop(engine_id: str) -> None:
        async with AgentClient(b.agent_url, b.token) as client:
            await client.stop(engine_id)

    engine = asyncio.run(start())
    try:
        assert engine.health == "healthy", engine.message
        yield engine
    finally:
        asyncio.run(stop(engine.id))


def write_config(path: Path, nodes: dict[str, TestNode]) -> Path:
    """The operator's config file naming the fleet's nodes."""
    path.write_text(
        "".join(
            f'[[nodes]]\nname = "{n.name}"\nurl = "{n.agent_url}"\ntoken_file = "{n.token_file}"\n'
            for n in nodes.values()
        )
    )
    return path
