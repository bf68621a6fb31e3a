"""What the Compose runtime hands to ``docker compose``: the catalog's file and env,
the deployment's identity labels, the checked model mount."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from agents.catalog_adapter import compose_path
from agents.runtime import Deployment, RuntimeError_
from agents.runtime.compose import ComposeRuntime
from agents.runtime.state import StateStore
from engines.catalog import PLATFORMS, UnsupportedOption, all_specs


def runtime(tmp_path: Path, platform: str) -> ComposeRuntime:
    return ComposeRuntime(node="node1", platform=platform, state=StateStore(tmp_path))


def test_cpu_llamacpp_renders_the_rig_file_with_identity(tmp_path: Path) -> None:
    dep = Deployment(
        id="abc123",
        kind="llamacpp",
        runtime="compose",
        port=18080,
        config={
            "model": "/models/tiny.gguf",
            "port": 18080,
            "max_num_seqs": 2,
            "image": "infer-top/llama-server:0.3.36-r1",
        },
    )
    path, env = runtime(tmp_path, "cpu").render(dep)
    assert path.name == "llama-server-cpu.yml"
    assert env["ENGINE_PORT"] == "18080" and env["ENGINE_BIND"] == "127.0.0.1"
    assert env["MODEL_PATH"] == "/models/tiny.gguf" and env["PARALLEL"] == "2"
    assert (env["DEPLOYMENT_ID"], env["NODE_NAME"]) == ("abc123", "node1")


def test_gpu_variant_and_model_mount(tmp_path: Path) -> None:
    models = tmp_path / "models"
    models.mkdir()
    dep = Deployment(
        id="gpu1",
        kind="vllm",
        runtime="compose",
        port=8000,
        gpu_ids=(2, 3),
        config={
            "model": "meta-llama/Llama-2-7b-hf",
            "port": 8000,
            "tensor_parallel": 2,
            "gpu_ids": [2, 3],
        },
        options={"model_dir": str(models)},
    )
    path, env = runtime(tmp_path, "nvidia").render(dep)
    assert path.name == "vllm.yml"
    assert (env["GPU_COUNT"], env["GPU_0"], env["GPU_1"]) == ("2", "2", "3")
    assert env["MODEL_CACHE"] == str(models.resolve())
    _, jetson_env = runtime(tmp_path, "jetson").render(dep)
    assert jetson_env["ENGINE_IMAGE"] != env["ENGINE_IMAGE"]  # the Jetson image


def test_an_engine_without_a_file_for_the_platform_is_explained(tmp_path: Path) -> None:
    dep = Deployment(id="x1", kind="sglang", runtime="compose", config={"model": "m"})
    with pytest.raises(RuntimeError_, match="no CPU compose file"):
        runtime(tmp_path, "cpu").render(dep)


def test_each_engines_start_timeout_is_the_longest_its_compose_files_allow() -> None:
    """The agent's health gate waits as long as Docker's own healthcheck would: the
    start_period plus retries x interval of the slowest of the engine's Compose files."""

    def seconds(value: str) -> float:
        assert value.endswith("s") and value[:-1].isdigit(), value
        return float(value[:-1])

    for spec in all_specs():
        budgets_s = {}
        for platform in PLATFORMS:
            try:
                path = compose_path(spec, platform)
            except UnsupportedOption:
                continue
            check = yaml.safe_load(path.read_text())["services"]["engine"]["healthcheck"]
            budgets_s[path.name] = seconds(check["start_period"]) + check["retries"] * seconds(
                check["interval"]
            )
        assert budgets_s, spec.kind
        assert spec.start_timeout_s == max(budgets_s.values()), (spec.kind, budgets_s)
