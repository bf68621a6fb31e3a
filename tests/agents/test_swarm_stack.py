"""The Swarm runtime's stack file: the engine's own Compose file (as Compose resolves it)
turned into a service on the node's host network, bound to its loopback, placed,
replicated and restarted by Swarm; what it cannot deploy is refused before anything runs."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import yaml

from agents.runtime import Deployment, RuntimeError_
from agents.runtime.state import StateStore
from agents.runtime.swarm import SwarmRuntime, task_deployment
from agents.runtime.swarm_stack import Placement, StackError, bind_to, checked_replicas
from control.k8s import gpu_kinds

IMAGE = "infer-top/llama-server:0.3.36-r1"


def runtime(tmp_path: Path, platform: str = "cpu") -> SwarmRuntime:
    return SwarmRuntime(node="a", platform=platform, state=StateStore(tmp_path))


def llama(**options: Any) -> Deployment:
    return Deployment(
        id="sw1",
        kind="llamacpp",
        runtime="swarm",
        port=18181,
        config={
            "model": "/models/tiny.gguf",
            "port": 18181,
            "max_num_seqs": 2,
            "image": IMAGE,
            "api_key": "sk-secret",
        },
        options=options,
    )


def stack(tmp_path: Path, dep: Deployment, platform: str = "cpu") -> dict[str, Any]:
    path = asyncio.run(runtime(tmp_path, platform).stack_for(dep))
    assert path.stat().st_mode & 0o077 == 0, "the stack file holds the engine's environment"
    data: dict[str, Any] = yaml.safe_load(path.read_text())
    return data


def test_rig_engine_becomes_a_host_network_service_on_the_chosen_node(tmp_path: Path) -> None:
    data = stack(tmp_path, llama(placement={"node": "b"}, replicas=1))
    engine = data["services"]["engine"]
    assert engine["image"] == IMAGE
    assert "ports" not in engine and engine["networks"] == ["hostnet"]
    assert data["networks"]["hostnet"] == {"external": True, "name": "host"}
    # The Compose file's own flags, its address rewritten: the node's loopback, the port.
    assert engine["command"][:2] == ["-m", "/models/tiny.gguf"]
    assert address(engine["command"], "--host", "--port") == ("127.0.0.1", "18181")
    assert "http://127.0.0.1:18181/health" in engine["healthcheck"]["test"]
    deploy = engine["deploy"]
    assert deploy["replicas"] == 1
    assert deploy["placement"] == {
        "constraints": ["node.hostname == b"],
        "max_replicas_per_node": 1,
    }
    assert deploy["restart_policy"]["condition"] == "any"
    # The model cache is the Compose file's named volume: a stack removal keeps it.
    assert data["volumes"] == {"model-cache": {"name": "infer-top-gguf"}}
    labels = engine["labels"]
    assert labels["org.infer-top.deployment"] == "sw1"
    assert labels["org.infer-top.runtime"] == "swarm"
    assert labels["org.infer-top.port"] == "18181"
    assert "org.infer-top.node" not in labels, "Swarm, not the deploying node, places it"
    assert "sk-secret" not in yaml.safe_dump(labels) + yaml.safe_dump(deploy["labels"])
    assert engine["environment"]["LLAMA_API_KEY"] == "sk-secret"  # the engine's own env
    # What a node's agent reads back from a task's labels.
    task = task_deployment(labels)
    assert task is not None
    assert (task.id, task.kind, task.port, task.model) == (
        "sw1",
        "llamacpp",
        18181,
        "/models/tiny.gguf",
    )
    assert "api_key" not in task.config


def test_gpu_reservation_becomes_a_generic_resource(tmp_path: Path) -> None:
    dep = Deployment(
        id="sw2",
        kind="vllm",
        runtime="swarm",
        port=18000,
        gpu_ids=(0, 1),
        config={
            "model": "m/m",
            "port": 18000,
            "tensor_parallel": 2,
            "gpu_ids": [0, 1],
        },
    )
    engine = stack(tmp_path, dep, "nvidia")["services"]["engine"]
    reservations = engine["deploy"]["resources"]["reservations"]
    assert reservations == {
        "generic_resources": [{"discrete_resource_spec": {"kind": "NVIDIA-GPU", "value": 2}}]
    }
    assert address(engine["command"], "--host", "--port") == ("127.0.0.1", "18000")


def address(command: list[str], host_flag: str, port_flag: str) -> tuple[str, str]:
    """The one address the engine's command gives: each flag exactly once, nothing bound
    to every interface."""
    assert command.count(host_flag) == 1 and command.count(port_flag) == 1, command
    assert not [a for a in command if a.startswith((f"{host_flag}=", f"{port_flag}="))]
    assert "0.0.0.0" not in command, command
    at = command.index(host_flag), command.index(port_flag)
    return command[at[0] + 1], command[at[1] + 1]


GPU_ENGINES = {
    # kind: (model, its address flags; None: the variable it reads instead)
    "vllm": ("m/m", ("--host", "--port")),
    "sglang": ("m/m", ("--host", "--port")),
    "lmdeploy": ("m/m", ("--server-name", "--server-port")),
    "tgi": ("m/m", ("--hostname", "--port")),
    "trtllm": ("m/m", ("--host", "--port")),
    "llamacpp": ("/models/tiny.gguf", ("--host", "--port")),
    "ollama": ("llama3.2", None),
}


def test_the_table_covers_every_gpu_compose_file() -> None:
    assert set(GPU_ENGINES) == set(gpu_kinds())


@pytest.mark.parametrize("kind", sorted(GPU_ENGINES))
def test_every_gpu_engine_listens_once_on_the_nodes_loopback(kind: str, tmp_path: Path) -> None:
    model, flags = GPU_ENGINES[kind]
    dep = Deployment(
        id=f"sw{kind}", kind=kind, runtime="swarm", port=18765,
        config={"model": model, "port": 18765},
    )  # fmt: skip
    swarm = runtime(tmp_path, "nvidia")
    swarm.check(dep)
    engine = stack(tmp_path, dep, "nvidia")["services"]["engine"]
    health = " ".join(engine["healthcheck"]["test"])
    if flags is None:  # its health check, `ollama list`, asks OLLAMA_HOST too
        assert engine["environment"]["OLLAMA_HOST"] == "127.0.0.1:18765"
        assert health == "CMD ollama list"
    else:
        assert address(engine["command"], *flags) == ("127.0.0.1", "18765")
        assert "http://127.0.0.1:18765/health" in health


def test_an_inline_config_goes_to_a_private_file_named_by_its_content(tmp_path: Path) -> None:
    """TensorRT-LLM's options file is a Compose inline config; ``docker stack deploy``
    takes files, and Swarm never updates a config: new content, new name."""
    dep = Deployment(
        id="swtrt", kind="trtllm", runtime="swarm", port=18765,
        config={"model": "m/m", "port": 18765},
    )  # fmt: skip
    data = stack(tmp_path, dep, "nvidia")
    assert data["services"]["engine"]["configs"][0]["source"] == "llm-api-options"
    [(name, config)] = data["configs"].items()
    assert name == "llm-api-options"
    path = Path(config["file"])
    assert path.read_text() == "{enable_iter_perf_stats: true}"
    assert path.stat().st_mode & 0o077 == 0
    assert config["name"].startswith("infer-swtrt_llm-api-options-")
    dep.config["image"] = "nvcr.io/nvidia/tensorrt-llm/release:1.1.0"  # Prometheus too
    renamed = stack(tmp_path, dep, "nvidia")["configs"]["llm-api-options"]
    assert renamed["name"] != config["name"] and "return_perf_metrics" in path.read_text()


def test_refusals_say_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(StackError, match="compose runtime"):
        bind_to("mystery", {"command": []}, "127.0.0.1", 1)
    with pytest.raises(RuntimeError_, match="plain word"):
        runtime(tmp_path).check(llama(placement={"node": "b || node.role==manager"}))
    with pytest.raises(StackError, match="KEY=VALUE"):
        Placement.from_option({"label": "gpu"})
    with pytest.raises(StackError, match="0 to 64"):
        checked_replicas(-1)
    assert Placement.from_option({"node": "b", "label": "pool=x"}).constraints() == [
        "node.hostname == b",
        "node.labels.pool == x",
    ]
