"""The process runtime with the rig's real llama-server binary, and simulated
engines (sim) through the same manager."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Callable
from pathlib import Path

import aiohttp
import pytest

from agents.client import AgentClient, AgentError
from agents.config import AgentConfig
from agents.embedded import embedded_agent

from .conftest import TOKEN


@pytest.mark.docker  # the rig fixture (llama-server binary, tiny model) comes with the rig
async def test_native_llama_server_lifecycle_and_adoption(
    rig: object, make_config: Callable[..., AgentConfig]
) -> None:
    model: Path = rig.tiny_model  # type: ignore[attr-defined]
    config = make_config(
        native_binaries={"llamacpp": rig.llama_server_bin},  # type: ignore[attr-defined]
        model_dirs=(model.parent,),
        adopt_on_start=True,
    )
    launch = {"model": str(model), "max_num_seqs": 1, "context_len": 128}
    async with embedded_agent(config) as (url, token), AgentClient(url, token) as client:
        engine = await client.start("llamacpp", launch, runtime="process")
        assert (engine.runtime, engine.health) == ("process", "healthy"), engine.message
        lines = [line async for line in client.logs(engine.id, tail=200)]
        assert any("listening" in line for line in lines)
        frame = await client.snapshot()
        assert any(e.id == engine.id for e in frame.engines)
    # The agent is gone; the engine (its own session) is not, and comes back with its id.
    async with embedded_agent(config) as (url, token), AgentClient(url, token) as client:
        (adopted,) = await client.engines()
        assert (adopted.id, adopted.runtime, adopted.port) == (engine.id, "process", engine.port)
        assert adopted.health == "healthy"
        pid = int(
            (config.state_dir / "deployments" / f"{engine.id}.json")
            .read_text()
            .split('"pid": ')[1]
            .split(",")[0]
        )
        events = client.events(since_seq=0)
        assert (await anext(events)).kind == "adopted"
        os.kill(pid, signal.SIGKILL)
        crashed = await asyncio.wait_for(anext(events), timeout=5)
        assert (crashed.kind, crashed.engine_id) == ("crashed", engine.id)
        await events.aclose()
        await client.stop(engine.id)
        assert await client.engines() == []


async def test_native_model_outside_model_dirs_is_refused(
    make_config: Callable[..., AgentConfig], tmp_path: Path
) -> None:
    config = make_config(
        native_binaries={"llamacpp": Path("/usr/bin/true")}, model_dirs=(tmp_path / "models",)
    )
    async with embedded_agent(config) as (url, token), AgentClient(url, token) as client:
        with pytest.raises(AgentError) as info:
            await client.start("llamacpp", {"model": "/etc/shadow"}, runtime="process")
        assert info.value.status == 403 and "outside the model directories" in info.value.message


async def test_simulated_engine_shows_in_frames_marked_simulated(agent: tuple) -> None:
    _, client = agent
    engine = await client.start("sim", {"profile": "h100-llama2-7b-vllm"})
    assert engine.simulated and engine.kind == "vllm" and engine.health == "healthy"
    async for frame in client.stream():
        sims = [e for e in frame.engines if e.id == engine.id]
        if sims and sims[0].kv_cache_usage is not None:
            break
    assert sims[0].simulated and sims[0].requests_running == 0
    stopped = await client.stop(engine.id)
    assert stopped.state == "stopped"
    kinds = [e.kind for e in await client.recent_events()]
    assert kinds == ["starting", "started", "healthy", "stopped"]


async def test_unknown_sim_profile_is_a_clear_error(agent: tuple) -> None:
    _, client = agent
    with pytest.raises(AgentError) as info:
        await client.start("sim", {"profile": "no-such-profile"})
    assert info.value.status == 400 and "no-such-profile" in info.value.message


async def test_simulated_crash_is_reported(agent: tuple) -> None:
    _, client = agent
    engine = await client.start(
        "sim", {"profile": "h100-llama2-7b-llamacpp", "faults": {"crash_after": 0}}
    )
    events = client.events()
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    async with aiohttp.ClientSession() as http:
        with contextlib.suppress(aiohttp.ClientError):
            async with http.post(f"{engine.url}/v1/chat/completions", json=body) as resp:
                await resp.read()
    crashed = await asyncio.wait_for(anext(events), timeout=10)
    await events.aclose()
    assert (crashed.kind, crashed.engine_id) == ("crashed", engine.id)
    (info,) = await client.engines()
    assert info.state == "crashed"
    await client.stop(engine.id)


async def test_bad_fault_settings_are_refused(agent: tuple) -> None:
    _, client = agent
    with pytest.raises(AgentError) as info:
        await client.start("sim", {"profile": "h100-llama2-7b-vllm", "faults": {"error_rate": 2}})
    # Refused before a record exists: nothing crashed, nothing to clean up.
    assert info.value.status == 400
    assert "error_rate must be within 0..1" in info.value.message
    assert await client.engines() == []


async def test_simulators_end_with_the_agent(make_config: Callable[..., AgentConfig]) -> None:
    async with embedded_agent(make_config()) as (url, token), AgentClient(url, token) as client:
        engine = await client.start("sim", {"profile": "h100-llama2-7b-vllm"})
    assert engine.url
    async with aiohttp.ClientSession() as http:
        with pytest.raises(aiohttp.ClientConnectionError):
            async with http.get(f"{engine.url}/health") as resp:
                await resp.read()


async def test_a_removal_of_volumes_the_engine_does_not_mount_stops_nothing(agent: tuple) -> None:
    url, client = agent
    engine = await client.start("sim", {"profile": "h100-llama2-7b-vllm"})
    assert engine.volumes == ()
    with pytest.raises(AgentError) as info:
        await client.stop(engine.id, remove_volumes=["infer-top-hf-cache"])
    assert info.value.status == 400
    assert "does not mount infer-top-hf-cache (it mounts no named volumes)" in info.value.message
    stop = f"{url}/v1/engines/{engine.id}/stop"
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with aiohttp.ClientSession(headers=headers) as http:
        for body in ({"remove_volumes": "infer-top-hf-cache"}, {"remove_volumes": [""]}):
            async with http.post(stop, json=body) as resp:
                assert resp.status == 400, body
                assert "remove_volumes must be" in (await resp.json())["error"]
    assert (await client.engine(engine.id)).state == "ready"  # nothing was stopped
    assert (await client.stop(engine.id)).state == "stopped"
