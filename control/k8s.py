"""Kubernetes manifests for an engine, from the same spec and Compose file as Compose.

The catalog renders the Compose environment (``EngineSpec.compose_env``: the engine's
arguments, image, GPU count, and every refusal of an option it cannot take); the
engine's Compose file, read with that environment (``control.compose_service``), gives
the entrypoint, command, container environment, cache mount and shared-memory need.
The spec gives the health and metrics routes and the start-up time.  Manifests are
built as data and written by a YAML serializer, so no model name or option can add
or alter a field.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import PurePosixPath

import yaml

from agents.catalog_adapter import compose_path, get_spec, launch_config
from control.compose_service import ComposeService, read_service
from engines.catalog import EngineSpec, LaunchConfig, all_specs

PLATFORM = "nvidia"
"""Manifests ask for ``nvidia.com/gpu`` (NVIDIA's device plugin): the x86-64 GPU files."""
GPU_RESOURCE = "nvidia.com/gpu"
NODE_LABEL = "kubernetes"
"""What the Compose identity label ``NODE_NAME`` holds in a render for Kubernetes."""
_DNS_LABEL = re.compile(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")
_QUANTITY = re.compile(r"[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?")
PROBE_PERIOD_S = 10
"""Startup and liveness probes run this often; the startup probe's failure threshold
makes the engine's whole start-up time (``start_timeout_s``) its budget."""

Manifest = dict[str, object]


class K8sRenderError(ValueError):
    """An option or name the manifests cannot carry."""


@dataclass(frozen=True, slots=True)
class K8sOptions:
    name: str | None = None
    """Of the Deployment, Service, PVC (``NAME-models``)...; default ``infer-KIND``."""
    namespace: str | None = None
    cache_size: str = "100Gi"
    storage_class: str | None = None
    shm_size: str = "16Gi"
    """The /dev/shm volume of an engine whose Compose file shares the host's IPC."""
    secret: str | None = None
    """A Secret whose keys become environment variables (HF_TOKEN, the API key)."""
    service_monitor: bool = False


def gpu_kinds() -> tuple[str, ...]:
    """The engine kinds with an x86-64 GPU Compose file (each gets manifests)."""
    kinds = []
    for spec in all_specs():
        try:
            compose_path(spec, PLATFORM)
        except (FileNotFoundError, ValueError):
            continue
        kinds.append(spec.kind)
    return tuple(kinds)


def render(kind: str, fields: Mapping[str, object], options: K8sOptions) -> list[Manifest]:
    """The manifests, in the order to apply them; K8sRenderError (or the catalog's
    UnsupportedOption / ValueError, worded as for Compose) for what cannot be rendered."""
    spec = get_spec(kind)
    name = options.name or f"infer-{kind.replace('_', '-')}"
    _check_names(name, options)
    _refuse_for_kubernetes(spec, fields, options)
    cfg = launch_config(dict(fields))
    env = spec.compose_env(cfg, deployment_id=name, node=NODE_LABEL, platform=PLATFORM)
    service = read_service(compose_path(spec, PLATFORM), env)
    port = cfg.port if "port" in fields else spec.container_port
    labels = {
        "app.kubernetes.io/name": name,
        "app.kubernetes.io/component": "inference-engine",
        "app.kubernetes.io/managed-by": "infer-top",
        "org.infer-top/engine": spec.kind,
    }

    def meta(object_name: str, **extra: object) -> Manifest:
        found: Manifest = {"name": object_name, "labels": dict(labels)}
        if options.namespace:
            found["namespace"] = options.namespace
        return found | extra

    claim: Manifest = {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": options.cache_size}},
    }
    if options.storage_class:
        claim["storageClassName"] = options.storage_class
    manifests: list[Manifest] = [
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": meta(f"{name}-models"),
            "spec": claim,
        }
    ]
    if service.configs:
        manifests.append(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": meta(f"{name}-config"),
                "data": {PurePosixPath(c.target).name: c.content for c in service.configs},
            }
        )
    manifests.append(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": meta(name, annotations={"org.infer-top/model": cfg.model}),
            "spec": {
                "replicas": 1,
                # The old pod holds the GPUs and the cache volume (ReadWriteOnce): a rolling
                # update's new pod would wait for them forever on a full node.
                "strategy": {"type": "Recreate"},
                "selector": {"matchLabels": {"app.kubernetes.io/name": name}},
                "template": {
                    "metadata": {"labels": dict(labels)} | _annotations(_scrape(spec, cfg)),
                    "spec": _pod(spec, service, env, name, options),
                },
            },
        }
    )
    manifests.append(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": meta(name),
            "spec": {
                "type": "ClusterIP",
                "selector": {"app.kubernetes.io/name": name},
                "ports": [{"name": "http", "port": port, "targetPort": "http"}],
            },
        }
    )
    if options.service_monitor:
        manifests.append(_service_monitor(spec, meta(name), name))
    return manifests


def _check_names(name: str, options: K8sOptions) -> None:
    # -models / -config suffixes stay within a DNS label's 63 characters
    if not _DNS_LABEL.fullmatch(name) or len(name) > 56:
        raise K8sRenderError(
            f"name {name!r} must be a DNS label of at most 56 characters: lower-case letters, "
            "digits and '-', starting with a letter"
        )
    if options.namespace is not None and not _DNS_LABEL.fullmatch(options.namespace):
        raise K8sRenderError(f"namespace {options.namespace!r} is not a DNS label")
    for what, value in (("storage class", options.storage_class), ("secret", options.secret)):
        if value is not None and not _DNS_SUBDOMAIN.fullmatch(value):
            raise K8sRenderError(f"{what} {value!r} is not a Kubernetes object name")
    for what, size in (("--cache-size", options.cache_size), ("--shm-size", options.shm_size)):
        if not _QUANTITY.fullmatch(size):
            raise K8sRenderError(f"{what} {size!r} is not a quantity such as 100Gi or 512Mi")


def _refuse_for_kubernetes(
    spec: EngineSpec, fields: Mapping[str, object], options: K8sOptions
) -> None:
    """What Compose takes but a manifest must not carry."""
    if fields.get("api_key") is not None:
        where = (
            f"put {spec.api_key_env} in a Secret and name it with --secret"
            if spec.api_key_env
            else f"{spec.display_name} takes its key on its command line only, which the "
            "Deployment would show: keep it behind an authenticating proxy"
        )
        raise K8sRenderError(f"an API key would be written into the manifest in clear: {where}")
    if fields.get("gpu_ids"):
        raise K8sRenderError(
            "gpu_ids: Kubernetes picks the GPUs; the count is tensor_parallel x "
            "pipeline_parallel (--set tensor_parallel=2)"
        )
    if options.service_monitor and spec.metrics_format != "prometheus":
        raise K8sRenderError(
            f"--service-monitor: {spec.display_name} serves no Prometheus text at "
            f"{spec.metrics_path} (infer-top's agent reads it instead)"
        )
    if options.service_monitor and fields.get("metrics") is False:
        raise K8sRenderError("--service-monitor: metrics=false turns the engine's metrics off")


def _annotations(annotations: dict[str, str]) -> Manifest:
    return {"annotations": annotations} if annotations else {}


def _scrape(spec: EngineSpec, cfg: LaunchConfig) -> dict[str, str]:
    if spec.metrics_format != "prometheus" or not cfg.metrics or spec.metrics_path is None:
        return {}
    return {
        "prometheus.io/scrape": "true",
        "prometheus.io/port": str(spec.container_port),
        "prometheus.io/path": spec.metrics_path,
    }


def _pod(
    spec: EngineSpec,
    service: ComposeService,
    env: Mapping[str, str],
    name: str,
    options: K8sOptions,
) -> Manifest:
    gpus = int(env["GPU_COUNT"])
    mounts: list[Manifest] = [{"name": "model-cache", "mountPath": service.cache_target}]
    volumes: list[Manifest] = [
        {"name": "model-cache", "persistentVolumeClaim": {"claimName": f"{name}-models"}}
    ]
    if service.ipc == "host":
        # Compose shares the host's IPC (NCCL's shared memory between workers); a pod gets
        # a memory-backed /dev/shm instead of the runtime's 64 MiB one.
        mounts.append({"name": "shm", "mountPath": "/dev/shm"})
        volumes.append(
            {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": options.shm_size}}
        )
    for n, config in enumerate(service.configs):
        file = PurePosixPath(config.target).name
        mounts.append(
            {"name": f"config-{n}", "mountPath": config.target, "subPath": file, "readOnly": True}
        )
        volumes.append({"name": f"config-{n}", "configMap": {"name": f"{name}-config"}})
    health = {"path": spec.health_path, "port": "http"}
    # Empty values are Compose's "unset" (HF_TOKEN without a token): left out, so a
    # Secret named by --secret can set them.
    env_list = [{"name": k, "value": v} for k, v in service.environment.items() if v]
    secret = [{"secretRef": {"name": options.secret}}] if options.secret else []
    container: Manifest = {
        "name": "engine",
        "image": service.image,
        "command": list(service.entrypoint),
        "args": list(service.command),
        "ports": [{"name": "http", "containerPort": spec.container_port}],
        **({"env": env_list} if env_list else {}),
        **({"envFrom": secret} if secret else {}),
        "resources": {"requests": {GPU_RESOURCE: gpus}, "limits": {GPU_RESOURCE: gpus}},
        "volumeMounts": mounts,
        "startupProbe": {
            "httpGet": health,
            "periodSeconds": PROBE_PERIOD_S,
            "timeoutSeconds": 5,
            "failureThreshold": math.ceil(spec.start_timeout_s / PROBE_PERIOD_S),
        },
        "readinessProbe": {
            "httpGet": health,
            "periodSeconds": 5,
            "timeoutSeconds": 5,
            "failureThreshold": 3,
        },
        # Alive means the port answers where the health route also says "too busy"
        # (busy_status): a restart would throw away a loaded model under load.
        "livenessProbe": {
            **({"tcpSocket": {"port": "http"}} if spec.busy_status else {"httpGet": health}),
            "periodSeconds": PROBE_PERIOD_S,
            "timeoutSeconds": 5,
            "failureThreshold": 6,
        },
        "securityContext": {"allowPrivilegeEscalation": False},
    }
    return {
        "automountServiceAccountToken": False,  # an engine never talks to the API server
        "containers": [container],
        "volumes": volumes,
    }


def _service_monitor(spec: EngineSpec, metadata: Manifest, name: str) -> Manifest:
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": metadata,
        "spec": {
            "selector": {"matchLabels": {"app.kubernetes.io/name": name}},
            "endpoints": [{"port": "http", "path": spec.metrics_path, "interval": "15s"}],
        },
    }


def to_yaml(manifests: list[Manifest]) -> str:
    """One multi-document YAML stream (``kubectl apply -f -`` reads it).  Through JSON
    first: every object then stands alone, so no ``&id001`` anchor stands for a repeated one."""
    fresh = json.loads(json.dumps(manifests))
    return str(yaml.safe_dump_all(fresh, sort_keys=False, default_flow_style=False))
