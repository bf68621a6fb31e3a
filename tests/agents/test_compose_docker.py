"""Against the real Docker daemon and the rig's llama-server image: the agent's
engine lifecycle, crash reports, and adoption after an agent restart."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from agents.client import AgentClient, AgentError
from agents.config import AgentConfig
from agents.embedded import embedded_agent
from compose import LABEL_DEPLOYMENT
from telemetry import TelemetryFrame
from tests.ports import free_port
from tests.waiting import apoll_until

from .conftest import TOKEN, containers, docker, llama, volume_exists

pytestmark = pytest.mark.docker


async def stream_chat(url: str, stop: asyncio.Event) -> int:
    """Streaming requests in a loop until told to stop; returns completed streams."""
    body = {
        "model": "tiny",
        "messages": [{"role": "user", "content": "count"}],
        "max_tokens": 48,
        "stream": True,
    }
    done = 0
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as http:
        while not stop.is_set():
            async with http.post(f"{url}/v1/chat/completions", json=body) as resp:
                assert resp.status == 200
                async for _ in resp.content:
                    pass
            done += 1
    return done


async def frames_until(
    client: AgentClient, ok: Callable[[TelemetryFrame], bool], limit: int
) -> TelemetryFrame | None:
    async for frame in client.stream():
        if ok(frame):
            return frame
        limit -= 1
        if limit <= 0:
            return None
    return None


async def test_start_load_swap_stop_leaves_nothing(
    rig: object, node: str, docker_config: AgentConfig
) -> None:
    async with embedded_agent(docker_config) as (url, token), AgentClient(url, token) as client:
        engine = await client.start("llamacpp", llama(rig, 2))
        assert (engine.state, engine.health) == ("ready", "healthy"), engine.message
        assert engine.url and len(containers(node)) == 1

        stop = asyncio.Event()
        load = asyncio.gather(stream_chat(engine.url, stop), stream_chat(engine.url, stop))

        def busy(frame: TelemetryFrame) -> bool:
            return any(
                e.id == engine.id
                and (e.requests_running or 0) >= 1
                and e.generation_tok_s is not None
                for e in frame.engines
            )

        frame = await frames_until(client, busy, limit=40)
        stop.set()
        completed = await load
        assert frame is not None, "no frame carried the engine's sample under load"
        sample = next(e for e in frame.engines if e.id == engine.id)
        assert sample.kind == "llamacpp" and sample.kv_cache_usage_is_estimate
        assert sum(completed) >= 1

        swapped = await client.swap(engine.id, llama(rig, 4))
        assert (swapped.id, swapped.port, swapped.health) == (engine.id, engine.port, "healthy")
        async with aiohttp.ClientSession() as http, http.get(f"{engine.url}/slots") as resp:
            assert len(await resp.json()) == 4  # the new configuration really runs
        kinds = [e.kind for e in await client.recent_events()]
        assert "swapped" in kinds

        # A configuration that cannot start: the previous one must come back.
        broken = {**llama(rig, 3), "model": "/models/missing.gguf"}
        with pytest.raises(AgentError) as info:
            await client.swap(engine.id, broken)
        assert info.value.status == 502 and "rolled back" in info.value.message
        back = await client.engine(engine.id)
        assert back.health == "healthy" and back.config["max_num_seqs"] == 4
        async with aiohttp.ClientSession() as http, http.get(f"{engine.url}/slots") as resp:
            assert len(await resp.json()) == 4
        assert (await client.recent_events())[-1].kind == "rolled_back"

        await client.stop(engine.id)
        assert await client.engines() == []
    assert containers(node) == []


async def test_adopted_after_agent_restart_and_crash_reported_fast(
    rig: object, node: str, docker_config: AgentConfig
) -> None:
    async with embedded_agent(docker_config) as (url, token), AgentClient(url, token) as client:
        engine = await client.start("llamacpp", llama(rig, 2))
        assert engine.health == "healthy", engine.message
    # The first agent is gone; its engine is not.
    assert len(containers(node)) == 1

    async with embedded_agent(docker_config) as (url, token), AgentClient(url, token) as client:
        (adopted,) = await client.engines()
        assert (adopted.id, adopted.kind, adopted.port) == (engine.id, "llamacpp", engine.port)
        assert adopted.config["max_num_seqs"] == 2
        assert (adopted.state, adopted.health) == ("ready", "healthy")
        events: AsyncIterator = client.events(since_seq=0)
        first = await anext(events)
        assert (first.kind, first.engine_id) == ("adopted", engine.id)

        (container,) = containers(node)
        killed_at = time.time()
        kill = await asyncio.create_subprocess_exec(
            "docker", "kill", container, stdout=asyncio.subprocess.DEVNULL
        )
        assert await kill.wait() == 0
        crashed = await asyncio.wait_for(anext(events), timeout=30)
        assert (crashed.kind, crashed.engine_id) == ("crashed", engine.id)
        assert crashed.ts >= killed_at
        # Docker's die event, not the status poll: it carries the exit code (SIGKILL).
        assert "exited (code 137, die)" in crashed.message, crashed.message
        (info,) = await client.engines()
        assert (info.state, info.health) == ("crashed", "dead")

        # Started again behind the agent's back: reported, health-gated, back in service.
        again = await asyncio.create_subprocess_exec(
            "docker", "start", container, stdout=asyncio.subprocess.DEVNULL
        )
        assert await again.wait() == 0
        restarted = await asyncio.wait_for(anext(events), timeout=30)
        healthy = await asyncio.wait_for(anext(events), timeout=30)
        assert (restarted.kind, healthy.kind) == ("restarted", "healthy")
        await events.aclose()
        (info,) = await client.engines()
        assert (info.state, info.health) == ("ready", "healthy")
        await client.stop(engine.id)
    assert containers(node) == []


def networks(project: str) -> list[str]:
    label = f"label=com.docker.compose.project={project}"
    out = subprocess.run(
        ["docker", "network", "ls", "-q", "--filter", label],
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.split()


def remove_networks(project: str) -> None:
    for network in networks(project):
        subprocess.run(["docker", "network", "rm", network], capture_output=True)


async def test_container_killed_while_no_agent_watched_is_adopted_as_crashed(
    rig: object, node: str, docker_config: AgentConfig
) -> None:
    async with embedded_agent(docker_config) as (url, token), AgentClient(url, token) as client:
        engine = await client.start("llamacpp", llama(rig, 1))
        assert engine.health == "healthy", engine.message
    project = f"infer-{engine.id}"
    record = docker_config.state_dir / "deployments" / f"{engine.id}.json"
    try:
        (container,) = containers(node)
        kill = await asyncio.create_subprocess_exec(
            "docker", "kill", container, stdout=asyncio.subprocess.DEVNULL
        )
        assert await kill.wait() == 0
        assert networks(project) and record.exists()  # what the dead engine leaves behind

        async with embedded_agent(docker_config) as (url, token), AgentClient(url, token) as client:
            info = await client.engine(engine.id)
            assert (info.state, info.health, info.exit_code) == ("crashed", "dead", 137)
            assert info.message and "exited (code 137)" in info.message
            assert (info.kind, info.port) == ("llamacpp", engine.port)
            events = await client.recent_events()
            assert [(e.kind, e.engine_id) for e in events] == [("adopted", engine.id)]
            stopped = await client.stop(engine.id)
            assert stopped.state == "stopped"
            assert await client.engines() == []
        assert containers(node) == []
        assert networks(project) == []
        assert not record.exists()
    finally:
        remove_networks(project)  # the node fixture removes containers only


async def test_logs_tail_and_follow(rig: object, node: str, docker_config: AgentConfig) -> None:
    async with embedded_agent(docker_config) as (url, token), AgentClient(url, token) as client:
        engine = await client.start("llamacpp", llama(rig, 1))
        try:
            lines = [line async for line in client.logs(engine.id, tail=500)]
            assert any("llama" in line.lower() for line in lines), lines[-5:]
            follow = client.logs(engine.id, tail=0, follow=True)
            next_line = asyncio.ensure_future(anext(follow))
            # llama-server logs its slot work per request (not /health); ask until the
            # follower, attached at some point, has seen one.
            body = {
                "model": "tiny",
                "messages": [{"role": "user", "content": "hi"}],
                "max_tokens": 4,
            }
            async with aiohttp.ClientSession() as http:
                for _ in range(30):
                    async with http.post(f"{engine.url}/v1/chat/completions", json=body) as r:
                        assert r.status == 200
                    done, _ = await asyncio.wait({next_line}, timeout=1.0)
                    if done:
                        break
            assert next_line.done(), "no log line arrived while following"
            assert "slot" in next_line.result()
            await follow.aclose()
        finally:
            await client.stop(engine.id)
    assert containers(node) == []


async def test_stop_during_a_background_start_leaves_nothing(
    rig: object, node: str, docker_config: AgentConfig
) -> None:
    async with embedded_agent(docker_config) as (url, token), AgentClient(url, token) as client:
        engine = await client.start("llamacpp", llama(rig, 1), wait=False)
        assert engine.state == "starting"
        stopped = await client.stop(engine.id)
        assert stopped.state == "stopped"
        assert await client.engines() == []
    assert containers(node) == []


async def test_adopted_from_labels_alone_when_the_state_dir_is_lost(
    rig: object, node: str, docker_config: AgentConfig, tmp_path: Path
) -> None:
    async with embedded_agent(docker_config) as (url, token), AgentClient(url, token) as client:
        engine = await client.start("llamacpp", llama(rig, 1))
    fresh = replace(docker_config, state_dir=tmp_path / "other-state")
    async with embedded_agent(fresh) as (url, token), AgentClient(url, token) as client:
        (adopted,) = await client.engines()
        assert (adopted.id, adopted.kind, adopted.port) == (engine.id, "llamacpp", engine.port)
        assert adopted.message and "adopted" in adopted.message
        frame = await frames_until(
            client, lambda f: any(e.requests_running is not None for e in f.engines), limit=20
        )
        assert frame is not None  # scraped again, found from its labels and published port
        await client.stop(engine.id)
    assert containers(node) == []


async def test_agent_process_killed_and_restarted_adopts_its_engine(
    rig: object, node: str, tmp_path: Path
) -> None:
    """The acceptance path with a real agent process: SIGKILL, start again, adopted."""
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    token_file.chmod(0o600)
    port = free_port()
    argv = [sys.executable, "-m", "agents.cli", "--listen", f"127.0.0.1:{port}",
            "--token-file", str(token_file), "--replay-trace", "--node-name", node,
            "--allow-engine", "llamacpp", "--allow-image", rig.llama_image,  # type: ignore[attr-defined]
            "--state-dir", str(tmp_path / "state"), "--interval", "500ms"]  # fmt: skip
    url = f"http://127.0.0.1:{port}"

    async def launch() -> asyncio.subprocess.Process:
        proc = await asyncio.create_subprocess_exec(
            *argv, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL
        )
        async with AgentClient(url, TOKEN) as probe:
            await apoll_until(
                probe.node_info, "the agent process to come up", ignoring=(AgentError,)
            )
        return proc

    agent = await launch()
    try:
        async with AgentClient(url, TOKEN) as client:
            engine = await client.start("llamacpp", llama(rig, 1))
            assert engine.health == "healthy", engine.message
        agent.kill()  # no shutdown hooks run
        await agent.wait()
        agent = await launch()
        async with AgentClient(url, TOKEN) as client:
            (adopted,) = await client.engines()
            assert (adopted.id, adopted.port, adopted.health) == (engine.id, engine.port, "healthy")
            await client.stop(engine.id)
    finally:
        agent.kill()
        await agent.wait()
    assert containers(node) == []


def inspect_container(container: str) -> dict[str, Any]:
    out = subprocess.run(
        ["docker", "inspect", container], capture_output=True, text=True, check=True
    )
    info: dict[str, Any] = json.loads(out.stdout)[0]
    return info


async def answer_status(url: str, key: str | None) -> int:
    headers = {} if key is None else {"Authorization": f"Bearer {key}"}
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{url}/v1/models", headers=headers) as resp:
            return resp.status


async def test_the_api_key_reaches_the_container_by_environment_not_command_line(
    rig: object, node: str, docker_config: AgentConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A key the agent itself inherits must not lock an engine started without one.
    monkeypatch.setenv("LLAMA_API_KEY", "the-agents-own-key")
    async with embedded_agent(docker_config) as (url, token), AgentClient(url, token) as client:
        locked, started = await asyncio.gather(
            client.start("llamacpp", {**llama(rig, 1), "api_key": "sk-c0ntainer"}),
            client.start("llamacpp", llama(rig, 1)),
        )
        try:
            assert locked.health == "healthy" and started.health == "healthy"
            assert locked.url and started.url
            statuses = [
                await answer_status(locked.url, None),
                await answer_status(locked.url, "sk-c0ntainer"),
                await answer_status(started.url, None),
            ]
            # The agent's own scrapes carry the key: the locked engine still reports.
            frame = await frames_until(
                client,
                lambda f: any(
                    e.id == locked.id and e.requests_running is not None for e in f.engines
                ),
                limit=20,
            )
            inspected = [inspect_container(c) for c in containers(node)]
            by_engine = {i["Config"]["Labels"][LABEL_DEPLOYMENT]: i for i in inspected}
        finally:
            await asyncio.gather(client.stop(locked.id), client.stop(started.id))
    assert statuses == [401, 200, 200]
    assert frame is not None, "no frame carried the locked engine's sample"
    shown = by_engine[locked.id]
    command_line = [shown["Path"], *shown["Args"], *(shown["Config"]["Cmd"] or [])]
    assert not any("sk-c0ntainer" in part for part in command_line), command_line
    assert "LLAMA_API_KEY=sk-c0ntainer" in shown["Config"]["Env"]
    keyless_env = by_engine[started.id]["Config"]["Env"]
    assert not any(e.startswith("LLAMA_API_KEY=") for e in keyless_env), keyless_env
    assert containers(node) == []


async def volume_file(rig: object, volume: str, name: str) -> str:
    """A file's text in an existing volume, read by a throw-away container."""
    assert await volume_exists(volume), f"volume {volume} is gone"  # `run -v` would create it
    image: str = rig.llama_image  # type: ignore[attr-defined]
    out = await asyncio.to_thread(
        docker, "run", "--rm", "--entrypoint", "/bin/busybox", "-v", f"{volume}:/cache",
        image, "cat", f"/cache/{name}",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


async def test_stop_and_swap_keep_the_model_cache_and_only_a_named_removal_deletes_it(
    rig: object, node: str, cache_volume: str, docker_config: AgentConfig
) -> None:
    async with embedded_agent(docker_config) as (url, token), AgentClient(url, token) as client:
        engine = await client.start("llamacpp", llama(rig, 2))
        assert engine.health == "healthy", engine.message
        assert (await client.engine(engine.id)).volumes == (cache_volume,)
        (container,) = containers(node)
        write = (
            "exec",
            container,
            "/bin/busybox",
            "sh",
            "-c",
            "echo downloaded > /cache/model.gguf",
        )
        assert (await asyncio.to_thread(docker, *write)).returncode == 0

        # Neither a swap nor a stop deletes what the engine downloaded.
        swapped = await client.swap(engine.id, llama(rig, 3))
        assert swapped.health == "healthy" and swapped.volumes == (cache_volume,)
        await client.stop(engine.id)
        assert containers(node) == []
        assert await volume_file(rig, cache_volume, "model.gguf") == "downloaded"

        # "Remove with data" names what goes, exactly as the engine lists it.
        engine = await client.start("llamacpp", llama(rig, 2))
        assert engine.health == "healthy", engine.message
        with pytest.raises(AgentError) as wrong:
            await client.stop(engine.id, remove_volumes=["infer-top-gguf"])
        assert wrong.value.status == 400
        assert f"does not mount infer-top-gguf (it mounts {cache_volume})" in wrong.value.message
        other = await client.start("llamacpp", llama(rig, 1))  # shares the node's cache
        assert other.health == "healthy", other.message
        with pytest.raises(AgentError) as shared:
            await client.stop(engine.id, remove_volumes=[cache_volume])
        assert shared.value.status == 400
        assert f"volume {cache_volume} is also used by container" in shared.value.message
        assert (await client.engine(engine.id)).state == "ready"  # refused: nothing stopped
        assert await volume_file(rig, cache_volume, "model.gguf") == "downloaded"
        await client.stop(other.id)

        bystander = f"{cache_volume}-bystander"
        assert (await asyncio.to_thread(docker, "volume", "create", bystander)).returncode == 0
        await client.stop(engine.id, remove_volumes=[cache_volume])
        assert not await volume_exists(cache_volume)
        assert await volume_exists(bystander)
        assert containers(node) == []
    records = [json.loads(line) for line in docker_config.audit_log.read_text().splitlines()]
    stops = [r for r in records if r["action"] == "stop" and r["engine"] == engine.id]
    assert [(r["outcome"], r["status"]) for r in stops] == [
        ("failed", 400),
        ("failed", 400),
        ("ok", 200),
    ]
    assert stops[-1]["remove_volumes"] == [cache_volume]


async def test_a_crashed_engine_is_removed_when_compose_is_missing(
    rig: object,
    node: str,
    docker_config: AgentConfig,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """A dead engine's stop answered 500 ("agent answered 500") where Compose was gone,
    and the row stayed `stopping dead` for good: now it is removed with what it left."""
    from agents.runtime.compose import find_compose

    async with embedded_agent(docker_config) as (url, token), AgentClient(url, token) as client:
        engine = await client.start("llamacpp", llama(rig, 1))
        assert engine.health == "healthy", engine.message
        project = f"infer-{engine.id}"
        record = docker_config.state_dir / "deployments" / f"{engine.id}.json"
        try:
            (container,) = containers(node)
            assert docker("kill", container).returncode == 0

            async def dead() -> bool:
                return (await client.engine(engine.id)).health == "dead"

            await apoll_until(dead, "the engine to be reported dead", timeout_s=30)
            with monkeypatch.context() as m:  # no Compose on this node any more
                m.setenv("PATH", str(tmp_path / "empty"))
                m.setattr(sys, "executable", str(tmp_path / "python"))
                find_compose.cache_clear()
                stopped = await client.stop(engine.id)
            find_compose.cache_clear()
            assert stopped.state == "stopped"
            assert stopped.message and "no Docker Compose found" in stopped.message
            assert f"docker compose -p {project} down" in stopped.message, stopped.message
            assert await client.engines() == []
            assert not record.exists()  # an agent restart does not bring the row back
            (event,) = [e for e in await client.recent_events() if e.kind == "stopped"]
            assert event.message == stopped.message
        finally:
            find_compose.cache_clear()
            remove_networks(project)  # the node fixture removes containers only
