"""Ollama is ready only once it has the model it was started for: the agent pulls a
missing one through /api/pull, its progress in the engine's message while it loads,
and a failed pull fails the start with the engine's own reason.  The engine is
tests/agents/standin_ollama.py, run by the real agent's process runtime as `ollama`."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import aiohttp
import pytest

from agents.client import AgentClient, AgentError
from agents.config import AgentConfig
from agents.embedded import embedded_agent
from sim.ollama_pull import LAYER_BYTES as SIM_LAYER_BYTES
from tests.agents.standin_ollama import LAYER_BYTES
from tests.agents.test_engine_faults import engine_where, engines_killed_afterwards

STANDIN = Path(__file__).with_name("standin_ollama.py")


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """The stand-in's model store ($OLLAMA_MODELS), empty at first."""
    path = tmp_path / "ollama-models"
    path.mkdir()
    return path


@pytest.fixture
def ollama_config(
    make_config: Callable[..., AgentConfig], tmp_path: Path, store: Path
) -> Iterator[AgentConfig]:
    wrapper = tmp_path / "ollama"
    wrapper.write_text(
        f'#!/bin/sh\nexec env OLLAMA_MODELS="{store}" "{sys.executable}" "{STANDIN}" "$@"\n'
    )
    wrapper.chmod(0o755)
    config = make_config(native_binaries={"ollama": wrapper}, interval_s=1.0)
    with engines_killed_afterwards(config.state_dir, str(STANDIN)):
        yield config


async def test_a_missing_model_is_pulled_with_progress_before_ready(
    ollama_config: AgentConfig, store: Path
) -> None:
    async with (
        embedded_agent(ollama_config) as (url, token),
        AgentClient(url, token) as client,
    ):
        engine = await client.start(
            "ollama", {"model": "tinyllama:1.1b"}, runtime="process", wait=False
        )
        # The stand-in holds the layer at 25 % until the test lets it go on.
        info = await engine_where(client, engine.id, lambda i: "25%" in (i.message or ""), 30)
        assert info.message == "pulling model tinyllama:1.1b: pulling 6a0746a1ec1a: 25% of 2.1 GB"
        assert (info.state, info.health) == ("loading", "loading")  # "/" answered long ago

        async with aiohttp.ClientSession() as session:
            await session.post(f"{info.url}/standin/resume")
        info = await engine_where(client, engine.id, lambda i: i.state != "loading", 30)
        assert (info.state, info.health) == ("ready", "healthy"), info.message
        assert info.message and info.message.startswith("pulled model tinyllama:1.1b in ")
        assert (store / "tinyllama:1.1b").read_text() == "pulled"
        await client.stop(engine.id)


async def test_a_model_it_has_is_ready_without_a_pull(
    ollama_config: AgentConfig, store: Path
) -> None:
    (store / "llama3.2").write_text("here before")
    async with (
        embedded_agent(ollama_config) as (url, token),
        AgentClient(url, token) as client,
    ):
        engine = await client.start("ollama", {"model": "llama3.2"}, runtime="process")
        assert (engine.state, engine.health) == ("ready", "healthy"), engine.message
        assert engine.message is None  # nothing was pulled
        assert (store / "llama3.2").read_text() == "here before"
        await client.stop(engine.id)


async def test_a_failed_pull_fails_the_start_with_the_engines_reason(
    ollama_config: AgentConfig, store: Path
) -> None:
    (store / "pull-error").write_text("pull model manifest: file does not exist")
    async with (
        embedded_agent(ollama_config) as (url, token),
        AgentClient(url, token) as client,
    ):
        with pytest.raises(AgentError) as refused:
            await client.start("ollama", {"model": "no-such-model"}, runtime="process")
        reason = "pulling model no-such-model failed: pull model manifest: file does not exist"
        assert refused.value.status == 502 and reason in str(refused.value)
        (engine,) = await client.engines()
        assert (engine.state, engine.health) == ("crashed", "dead")
        assert (engine.message or "").startswith(reason), engine.message
        await client.stop(engine.id)


async def test_models_pull_fetches_an_ollama_tag_through_the_running_engine(
    ollama_config: AgentConfig, store: Path
) -> None:
    (store / "llama3.2").write_text("here before")
    async with (
        embedded_agent(ollama_config) as (url, token),
        AgentClient(url, token) as client,
    ):
        with pytest.raises(AgentError) as none_runs:
            await client.pull_model("tinyllama:1.1b", engine="ollama")
        assert none_runs.value.status == 409
        assert "no Ollama engine is ready on node testnode" in none_runs.value.message

        engine = await client.start("ollama", {"model": "llama3.2"}, runtime="process")
        pull = await client.pull_model("tinyllama:1.1b", engine="ollama")
        assert (pull.source, pull.state) == ("ollama", "pulling")
        seen = []
        async with asyncio.timeout(60):
            async for step in client.follow_pull(pull.id):
                seen.append(step)
                if step.done_bytes == LAYER_BYTES // 4:  # held there until resumed
                    assert step.total_bytes == LAYER_BYTES
                    assert step.message == "pulling 6a0746a1ec1a: 25% of 2.1 GB"
                    async with aiohttp.ClientSession() as session:
                        await session.post(f"{engine.url}/standin/resume")
        assert seen[-1].state == "done", seen[-1].message
        assert any(s.done_bytes == LAYER_BYTES for s in seen)
        assert (store / "tinyllama:1.1b").read_text() == "pulled"
        await client.stop(engine.id)


async def test_models_pull_through_a_simulated_ollama(agent: tuple[str, AgentClient]) -> None:
    _, client = agent
    engine = await client.start("sim", {"profile": "h100-llama3.1-8b-ollama", "time_scale": 0.01})
    assert engine.kind == "ollama" and engine.state == "ready", engine.message
    pull = await client.pull_model("qwen2.5:0.5b", engine="ollama")
    async with asyncio.timeout(60):
        seen = [step async for step in client.follow_pull(pull.id)]
    final = seen[-1]
    assert final.state == "done", final.message
    assert final.total_bytes == final.done_bytes == SIM_LAYER_BYTES
    assert final.message == f"qwen2.5:0.5b is in the Ollama engine {engine.id}'s store"
    await client.stop(engine.id)
