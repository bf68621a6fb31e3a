"""``infer-top k8s render``: every GPU engine's manifests pass the Kubernetes schemas
offline, and its Deployment runs exactly what the agent's Compose path runs for the same
options (``docker compose config`` on the project ``ComposeRuntime.render`` prepares):
one spec, two renders.  Refusals read as Compose's."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from agents.runtime import Deployment, RuntimeError_
from agents.runtime.compose import ComposeRuntime
from agents.runtime.state import StateStore
from compose import compose_dir
from control.k8s import gpu_kinds
from engines.catalog import all_specs, env_file_text, get_spec
from tests.compose.test_compose_engine_files import compose_cli
from tui.cli import main

K8S_VERSION = "1.31.0"
GPU_KINDS = [
    spec.kind
    for spec in all_specs()
    if (compose_dir() / f"{spec.compose_name('nvidia')}.yml").is_file()
]
TUNING = {  # one tuning flag each engine's spec allows (`ollama serve` takes none)
    "vllm": ["--seed", "7"],
    "sglang": ["--random-seed", "7"],
    "tgi": ["--max-best-of", "2"],
    "llamacpp": ["--seed", "7"],
    "ollama": [],
    "trtllm": ["--max_beam_width", "2"],
    "lmdeploy": ["--cache-block-seq-len", "64"],
}


def fields_for(kind: str) -> dict[str, Any]:
    """Options that reach the arguments and the environment: a model with a space,
    a context, a batch cap, two GPUs where the engine shards, a tuning flag."""
    spec = get_spec(kind)
    fields: dict[str, Any] = {
        "model": "/models/My Model" if kind != "ollama" else "qwen2.5:0.5b",
        "context_len": 4096,
        "max_num_seqs": 8,
        "extra_args": TUNING[kind],
    }
    if spec.tp_engine:
        fields["tensor_parallel"] = 2
    return fields


def cli_args(kind: str, fields: dict[str, Any]) -> list[str]:
    args = ["k8s", "render", kind]
    for name, value in fields.items():
        args.append(f"--set={name}={json.dumps(value)}")
    return args


def rendered(capsys: pytest.CaptureFixture[str], args: list[str]) -> list[dict[str, Any]]:
    assert main(args) == 0, capsys.readouterr().err
    docs = [d for d in yaml.safe_load_all(capsys.readouterr().out) if d is not None]
    return docs


def by_kind(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {d["kind"]: d for d in docs}


def compose_project(kind: str, fields: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    """The engine's project as the agent's Compose path runs it: ComposeRuntime.render's
    file and environment, resolved by ``docker compose config``."""
    dep = Deployment(id="k8stest", kind=kind, runtime="compose", config=dict(fields))
    path, env = ComposeRuntime(node="n1", platform="nvidia", state=StateStore(tmp_path)).render(dep)
    env_file = tmp_path / "engine.env"
    env_file.write_text(env_file_text(env))
    done = subprocess.run(
        [*compose_cli(), "-f", str(path), "--env-file", str(env_file), "-p", "k8stest",
         "config", "--format", "json"],
        capture_output=True, text=True, timeout=60, cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin"},  # nothing passed through from this process
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    project: dict[str, Any] = json.loads(done.stdout)
    return project


def test_every_gpu_compose_file_is_rendered() -> None:
    assert gpu_kinds() == tuple(GPU_KINDS)
    assert {"vllm", "sglang", "tgi", "llamacpp", "ollama", "trtllm", "lmdeploy"} <= set(GPU_KINDS)


@pytest.mark.parametrize("kind", GPU_KINDS)
def test_manifests_validate_against_the_kubernetes_schemas(
    kind: str, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = get_spec(kind)
    options = ["--namespace", "llm", "--storage-class", "fast-ssd", "--secret", "hf-token"]
    if spec.metrics_format == "prometheus":
        options.append("--service-monitor")
    docs = rendered(capsys, [*cli_args(kind, fields_for(kind)), *options])
    kinds = [d["kind"] for d in docs]
    assert kinds[:1] == ["PersistentVolumeClaim"] and {"Deployment", "Service"} <= set(kinds)
    for doc in docs:
        if doc["kind"] == "ServiceMonitor":  # a CRD: no built-in schema
            continue
        # strict: an unknown or misplaced field fails too
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    found = by_kind(docs)
    pod = found["Deployment"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    gpus = 2 if spec.tp_engine else 1
    assert container["resources"]["limits"] == {"nvidia.com/gpu": gpus}
    assert container["resources"]["requests"] == {"nvidia.com/gpu": gpus}
    assert container["envFrom"] == [{"secretRef": {"name": "hf-token"}}]
    startup = container["startupProbe"]
    assert startup["httpGet"] == {"path": spec.health_path, "port": "http"}
    budget_s = startup["periodSeconds"] * startup["failureThreshold"]
    assert spec.start_timeout_s <= budget_s < spec.start_timeout_s + startup["periodSeconds"]
    assert container["readinessProbe"]["httpGet"]["path"] == spec.health_path
    liveness = container["livenessProbe"]
    # an engine that answers its health route "too busy" under load stays alive
    assert ("tcpSocket" in liveness) is (spec.busy_status is not None)
    assert container["ports"] == [{"name": "http", "containerPort": spec.container_port}]
    claim = found["PersistentVolumeClaim"]
    assert claim["spec"]["storageClassName"] == "fast-ssd"
    assert {
        "name": "model-cache",
        "persistentVolumeClaim": {"claimName": claim["metadata"]["name"]},
    } in pod["volumes"]
    annotations = found["Deployment"]["spec"]["template"]["metadata"].get("annotations", {})
    if spec.metrics_format == "prometheus":
        assert annotations == {
            "prometheus.io/scrape": "true",
            "prometheus.io/port": str(spec.container_port),
            "prometheus.io/path": spec.metrics_path,
        }
        monitor = found["ServiceMonitor"]
        assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
        assert monitor["spec"]["selector"]["matchLabels"] == found["Service"]["spec"]["selector"]
        assert monitor["spec"]["endpoints"][0]["path"] == spec.metrics_path
    else:  # TensorRT-LLM's /metrics is JSON, Ollama's /api/ps no metrics page
        assert annotations == {}
    assert all(d["metadata"]["namespace"] == "llm" for d in docs)


@pytest.mark.parametrize("kind", GPU_KINDS)
def test_deployment_runs_what_compose_runs(
    kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fields = fields_for(kind)
    project = compose_project(kind, fields, tmp_path)
    (service,) = project["services"].values()
    found = by_kind(rendered(capsys, cli_args(kind, fields)))
    pod = found["Deployment"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["args"] == service["command"]
    assert container["command"] == service["entrypoint"]
    assert container["image"] == service["image"]
    # Compose's empty value is an unset variable (HF_TOKEN without a token)
    compose_env = {k: v for k, v in (service.get("environment") or {}).items() if v}
    assert {e["name"]: e["value"] for e in container.get("env", [])} == compose_env
    (device,) = service["deploy"]["resources"]["reservations"]["devices"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == len(device["device_ids"])
    (port,) = service["ports"]
    assert container["ports"][0]["containerPort"] == port["target"]
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    (volume,) = service["volumes"]
    assert mounts["model-cache"]["mountPath"] == volume["target"]
    # Compose shares the host's IPC for NCCL; the pod gets a memory-backed /dev/shm
    assert ("shm" in mounts) is (service.get("ipc") == "host")
    if "shm" in mounts:
        assert mounts["shm"]["mountPath"] == "/dev/shm"
        assert {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}} in pod[
            "volumes"
        ]
    configs = {
        m["mountPath"]: m for m in container["volumeMounts"] if m["name"].startswith("config")
    }
    assert sorted(configs) == sorted(c["target"] for c in service.get("configs") or ())
    if configs:  # TensorRT-LLM's options file, with the content Compose would mount
        content = list(found["ConfigMap"]["data"].values())
        assert content == [c["content"] for c in project["configs"].values()]


REFUSED = [
    ("tgi", {"pipeline_parallel": 2}),  # the spec's _flags refuses it
    ("llamacpp", {"quantization": "awq"}),  # GGUF files carry their quantization
    ("ollama", {"tensor_parallel": 2}),
    ("tgi", {"prefix_caching": True}),  # a typed start option the engine has no switch for
    ("vllm", {"extra_args": ["--trust-remote-code"]}),  # a flag the allow-list refuses
    ("sglang", {"quantization": "int3"}),  # a value its own argparse would refuse
]


@pytest.mark.parametrize(("kind", "bad"), REFUSED, ids=[f"{k}-{next(iter(b))}" for k, b in REFUSED])
def test_a_refused_option_is_refused_with_the_compose_message(
    kind: str, bad: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fields = {"model": "m", **bad}
    dep = Deployment(id="refused", kind=kind, runtime="compose", config=fields)
    with pytest.raises(RuntimeError_) as refused:
        ComposeRuntime(node="n1", platform="nvidia", state=StateStore(tmp_path)).render(dep)
    compose_message = str(refused.value.__cause__)
    assert compose_message and compose_message in str(refused.value)

    assert main(cli_args(kind, fields)) == 2
    captured = capsys.readouterr()
    assert captured.out == ""  # nothing half-rendered
    assert captured.err.strip() == f"infer-top k8s render: {compose_message}"


def test_no_secret_and_no_gpu_ids_in_a_manifest(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["k8s", "render", "vllm", "--model", "m", "--set", "api_key=sk-secret"]) == 2
    err = capsys.readouterr().err
    assert "VLLM_API_KEY" in err and "--secret" in err and "sk-secret" not in err
    assert main(["k8s", "render", "sglang", "--model", "m", "--set", "api_key=sk-1"]) == 2
    assert "command line" in capsys.readouterr().err
    assert main(["k8s", "render", "vllm", "--model", "m", "--set", "gpu_ids=[0,1]"]) == 2
    assert "tensor_parallel" in capsys.readouterr().err
    assert main(["k8s", "render", "ollama", "--model", "m", "--service-monitor"]) == 2
    assert "Prometheus" in capsys.readouterr().err


def test_names_and_values_cannot_inject_yaml(capsys: pytest.CaptureFixture[str]) -> None:
    model = "org/m: {x} # --- [kind: Secret] &a *b"
    docs = rendered(capsys, ["k8s", "render", "vllm", "--model", model])
    assert [d["kind"] for d in docs] == ["PersistentVolumeClaim", "Deployment", "Service"]
    deployment = by_kind(docs)["Deployment"]
    assert deployment["metadata"]["annotations"]["org.infer-top/model"] == model
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--model") + 1] == model
    for name in ("Evil", "a\n---", "x" * 60, "-lead"):
        assert main(["k8s", "render", "vllm", "--model", "m", f"--name={name}"]) == 2
        assert "DNS label" in capsys.readouterr().err
    assert main(["k8s", "render", "vllm", "--model", "m\n---\nkind: Secret"]) == 2
    assert "control characters" in capsys.readouterr().err
    assert main(["k8s", "render", "vllm", "--model", "m", "--cache-size", "1Gi\nx: y"]) == 2
    assert "quantity" in capsys.readouterr().err


def test_output_directory_holds_one_file_per_object(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "k8s"
    args = ["k8s", "render", "trtllm", "--model", "m", "--name", "trt", "--set", "port=80"]
    assert main([*args, "-o", str(out)]) == 0
    assert capsys.readouterr().out == ""
    files = sorted(p.name for p in out.iterdir())
    assert files == [
        "trt-config.configmap.yaml",
        "trt-models.persistentvolumeclaim.yaml",
        "trt.deployment.yaml",
        "trt.service.yaml",
    ]
    for path in out.iterdir():
        (doc,) = yaml.safe_load_all(path.read_text())
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    service = yaml.safe_load((out / "trt.service.yaml").read_text())
    # clients reach the Service on the port asked for, the engine on its own
    assert service["spec"]["ports"] == [{"name": "http", "port": 80, "targetPort": "http"}]


def test_help_explains(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["k8s", "render", "--help"])
    assert done.value.code == 0
    text = capsys.readouterr().out
    for word in ("--model", "--service-monitor", "--secret", "--cache-size", "nvidia.com/gpu",
                 "kubectl apply", "refused as `infer-top engine start`", *GPU_KINDS):  # fmt: skip
        assert word in text, word
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "k8s" in capsys.readouterr().out
