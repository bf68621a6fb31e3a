"""Per-process GPU memory: the agent attributes each PID NVML lists to the deployment
that owns it (its container's cgroup, or the native engine's process tree), streams it
and exports it on /metrics.

The only stand-in is the NVML library (the replay, ``agents.collectors.replay``), fed a
process list naming real PIDs: the rig's llama-server as a native process and as a
Compose container, and a process no engine owns."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from agents.client import AgentClient
from agents.config import AgentConfig
from agents.embedded import embedded_agent
from agents.runtime.owners import container_of
from compose import LABEL_DEPLOYMENT
from telemetry import GpuProcess
from tests.conftest import IN_CI
from tests.waiting import apoll_until

from .conftest import GIB, docker, llama, write_processes


async def gpu0_process(client: AgentClient, pid: int, engine: str | None) -> GpuProcess:
    """GPU 0's entry for ``pid`` once the agent's frame attributes it to ``engine``."""

    async def listed() -> GpuProcess | None:
        frame = await client.snapshot()
        return next((p for p in frame.gpus[0].processes if p.pid == pid), None)

    found = await apoll_until(
        listed,
        f"PID {pid} on GPU 0 attributed to {engine or 'no engine'}",
        done=lambda p: p is not None and p.engine == engine,
    )
    assert found is not None
    return found


def process_memory(text: str) -> dict[tuple[str, str, str], float]:
    """(gpu, pid, engine) -> bytes, from the agent's Prometheus exposition."""
    return {
        (s.labels["gpu"], s.labels["pid"], s.labels["engine"]): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "infer_gpu_process_memory_used_bytes"
    }


async def test_a_process_no_engine_owns_is_other_and_exported_with_its_labels(
    make_config: Callable[..., AgentConfig], processes: Path, bystander: int
) -> None:
    write_processes(processes, {bystander: 3 * GIB})
    config = make_config(replay_processes=processes)
    async with embedded_agent(config) as (url, token), AgentClient(url, token) as client:
        proc = await gpu0_process(client, bystander, None)
        assert (proc.name, proc.mem_used_bytes, proc.usage) == ("sleep", 3 * GIB, "C")
        text = await client.metrics_text()
    assert process_memory(text) == {("0", str(bystander), ""): 3 * GIB}


async def test_promtool_finds_the_exposition_with_gpu_processes_clean(
    make_config: Callable[..., AgentConfig], processes: Path, bystander: int
) -> None:
    if shutil.which("promtool") is None:
        # scripts/rig.sh installs it; CI must show the exposition passed Prometheus's check
        if IN_CI:
            pytest.fail("CI=true and promtool is missing: run scripts/rig.sh", pytrace=False)
        pytest.skip("promtool is not installed (scripts/rig.sh installs it)")
    write_processes(processes, {bystander: 3 * GIB, os.getpid(): 2**64 - 1})
    config = make_config(replay_processes=processes)
    async with embedded_agent(config) as (url, token), AgentClient(url, token) as client:
        await gpu0_process(client, bystander, None)
        text = await client.metrics_text()
    assert "infer_gpu_process_memory_used_bytes{" in text
    check = await asyncio.to_thread(
        subprocess.run,
        ["promtool", "check", "metrics"],
        input=text,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert (check.returncode, check.stdout + check.stderr) == (0, "")


@pytest.mark.docker  # the rig's llama-server binary and tiny model come with the rig
async def test_a_native_engines_process_is_attributed_to_its_deployment(
    rig: object, make_config: Callable[..., AgentConfig], processes: Path, bystander: int
) -> None:
    model: Path = rig.tiny_model  # type: ignore[attr-defined]
    config = make_config(
        native_binaries={"llamacpp": rig.llama_server_bin},  # type: ignore[attr-defined]
        model_dirs=(model.parent,),
        replay_processes=processes,
    )
    launch = {"model": str(model), "max_num_seqs": 1, "context_len": 128}
    async with embedded_agent(config) as (url, token), AgentClient(url, token) as client:
        engine = await client.start("llamacpp", launch, runtime="process")
        try:
            record = json.loads(
                (config.state_dir / "deployments" / f"{engine.id}.json").read_text()
            )
            pid = int(record["pid"])
            write_processes(processes, {pid: 5 * GIB, bystander: GIB})
            proc = await gpu0_process(client, pid, engine.id)
            assert (proc.name, proc.mem_used_bytes) == ("llama-server", 5 * GIB)
            other = await gpu0_process(client, bystander, None)
            assert other.name == "sleep"
            exported = process_memory(await client.metrics_text())
            assert exported[("0", str(pid), engine.id)] == 5 * GIB
            assert exported[("0", str(bystander), "")] == GIB
        finally:
            await client.stop(engine.id)


@pytest.mark.docker
async def test_a_compose_engines_process_is_attributed_through_its_containers_cgroup(
    rig: object, docker_config: AgentConfig, processes: Path, bystander: int
) -> None:
    config = dataclasses.replace(docker_config, replay_processes=processes)
    async with embedded_agent(config) as (url, token), AgentClient(url, token) as client:
        engine = await client.start("llamacpp", llama(rig, 1))
        try:
            assert engine.health == "healthy", engine.message
            found = await asyncio.to_thread(
                docker,
                "ps",
                "-q",
                "--no-trunc",
                "--filter",
                f"label={LABEL_DEPLOYMENT}={engine.id}",
            )
            (container,) = found.stdout.split()
            inspect = await asyncio.to_thread(docker, "inspect", "-f", "{{.State.Pid}}", container)
            pid = int(inspect.stdout)
            assert container_of(pid) == container  # the cgroup names the container
            write_processes(processes, {pid: 7 * GIB, bystander: GIB})
            proc = await gpu0_process(client, pid, engine.id)
            assert proc.mem_used_bytes == 7 * GIB
            await gpu0_process(client, bystander, None)
            exported = process_memory(await client.metrics_text())
            assert exported[("0", str(pid), engine.id)] == 7 * GIB
        finally:
            await client.stop(engine.id)


def test_the_container_id_is_read_from_either_cgroup_driver(tmp_path: Path) -> None:
    cid = "4aa48a7ae6ca647de5fe6044505878982f3b9eb0144082d992a3266a149ed0c6"
    layouts = {
        101: f"12:memory:/docker/{cid}\n0::/docker/{cid}\n",  # cgroupfs driver
        102: f"0::/system.slice/docker-{cid}.scope\n",  # systemd driver, cgroup v2
        103: "0::/user.slice/user-1000.slice/session-2.scope\n",  # no container
    }
    for pid, text in layouts.items():
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "cgroup").write_text(text)
    assert container_of(101, tmp_path) == cid
    assert container_of(102, tmp_path) == cid
    assert container_of(103, tmp_path) is None
    assert container_of(104, tmp_path) is None  # gone
