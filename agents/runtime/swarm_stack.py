"""A Swarm stack file from an engine's own Compose file, as Compose resolved it.

``docker stack deploy`` takes Compose files, but a service in a swarm cannot publish a
port on one node's loopback: the engine joins the node's ``host`` network instead and is
told to listen on ``127.0.0.1:<port>`` itself (its address flags rewritten, or the
variable it reads them from), as the Compose engine's published port does.  The rest
(image, command, environment, volumes, configs, labels, health check) is the Compose
file's, so one file drives both runtimes.  Pure functions: the runtime feeds them
``compose config`` output and writes what they return.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from compose import LABEL_DEPLOYMENT, LABEL_ENGINE, LABEL_MANAGED, LABEL_NODE, LABEL_PREFIX

LABEL_RUNTIME = f"{LABEL_PREFIX}.runtime"
LABEL_PORT = f"{LABEL_PREFIX}.port"
LABEL_CONFIG = f"{LABEL_PREFIX}.config"
"""The launch settings, secrets redacted (JSON): a node's agent shows a task's model."""
HOST_NETWORK = "hostnet"
"""The stack's name for the node's ``host`` network (external, as Swarm requires)."""
SERVICE = "engine"
"""The one service every Compose file in compose/ defines."""

_BIND_FLAGS: Mapping[str, tuple[str, str]] = {
    # The address and port flags of each engine's command: the Compose file's values are
    # rewritten (some engines refuse a flag given twice: TGI's clap), added where absent.
    "llamacpp": ("--host", "--port"),
    "vllm": ("--host", "--port"),
    "sglang": ("--host", "--port"),
    "lmdeploy": ("--server-name", "--server-port"),
    "tgi": ("--hostname", "--port"),
    "trtllm": ("--host", "--port"),
}
_BIND_ENV: Mapping[str, str] = {"ollama": "OLLAMA_HOST"}
"""Engines told their address in one environment variable (``host:port``)."""


class StackError(ValueError):
    """The engine's Compose file or the placement cannot become a Swarm service."""


@dataclass(frozen=True)
class Placement:
    """Where Swarm may run the engine's replicas (all that are given must hold)."""

    node: str | None = None
    """A Swarm node's host name (``docker node ls``): infer-top names nodes after it."""
    label: str | None = None
    """A node label, ``KEY=VALUE`` (``docker node update --label-add KEY=VALUE NODE``)."""

    @classmethod
    def from_option(cls, option: object) -> Placement:
        if option is None:
            return cls()
        if not isinstance(option, Mapping) or set(option) - {"node", "label"}:
            raise StackError(
                'placement must be {"node": NAME} and/or {"label": "KEY=VALUE"}, '
                f"not {option!r}"
            )
        node, label = option.get("node"), option.get("label")
        for name, value in (("node", node), ("label", label)):
            if value is not None and (not isinstance(value, str) or not _plain(value)):
                raise StackError(f"placement {name} {value!r} must be a plain word")
        if label is not None and "=" not in label:
            raise StackError(f"placement label {label!r} must be KEY=VALUE")
        return cls(node=node, label=label)

    def constraints(self) -> list[str]:
        out = []
        if self.node:
            out.append(f"node.hostname == {self.node}")
        if self.label:
            key, value = self.label.split("=", 1)
            out.append(f"node.labels.{key} == {value}")
        return out

    def describe(self) -> str:
        return " and ".join(self.constraints()) or "any node"


def _plain(value: str) -> bool:
    """Letters, digits and ``._-=`` only: nothing a constraint expression would parse."""
    return bool(value) and all(c.isalnum() or c in "._-=" for c in value)


def checked_replicas(option: object) -> int:
    if option is None:
        return 1
    if isinstance(option, bool) or not isinstance(option, int) or not 0 <= option <= 64:
        raise StackError(f"replicas must be a whole number from 0 to 64, not {option!r}")
    return option


def bind_to(kind: str, service: dict[str, Any], host: str, port: int) -> None:
    """Make the engine listen on ``host:port`` of the node's own network."""
    if kind in _BIND_FLAGS:
        command = service.get("command") or []
        if isinstance(command, str):
            raise StackError(f"{kind}'s Compose command is one string: cannot set its address")
        for flag, value in zip(_BIND_FLAGS[kind], (host, str(port)), strict=True):
            command = _with_flag(command, flag, value)
        service["command"] = command
    elif kind in _BIND_ENV:
        service.setdefault("environment", {})[_BIND_ENV[kind]] = f"{host}:{port}"
    else:
        known = ", ".join(sorted([*_BIND_FLAGS, *_BIND_ENV]))
        raise StackError(
            f"the swarm runtime cannot tell {kind} to listen on the node's loopback "
            f"(it can for {known}): run it with the compose runtime"
        )


def _with_flag(command: list[str], flag: str, value: str) -> list[str]:
    """``command`` with ``flag`` set to ``value``: where it is given (``FLAG V`` or
    ``FLAG=V``) its value is replaced, else it is added, so the engine sees it once."""
    out: list[str] = []
    args = iter(command)
    found = False
    for arg in args:
        if arg == flag:
            next(args, None)  # the Compose file's value
        elif not arg.startswith(f"{flag}="):
            out.append(arg)
            continue
        if not found:
            out += [flag, value]
        found = True
    return out if found else [*out, flag, value]


def config_files(rendered: Mapping[str, Any], directory: str) -> dict[str, tuple[str, str]]:
    """The Compose file's inline configs (``content``: ``docker stack deploy`` takes only
    files) by name: the file each goes to under ``directory``, and its content."""
    return {
        name: (f"{directory}/{name}.conf", str(spec["content"]))
        for name, spec in (rendered.get("configs") or {}).items()
        if isinstance(spec, Mapping) and "content" in spec
    }


def _stack_configs(rendered: Mapping[str, Any], directory: str) -> dict[str, Any]:
    """The stack's ``configs``: an inline one from its file, under a name that changes
    with its content (Swarm never updates a config: a redeploy with new content makes a
    new one)."""
    inline = config_files(rendered, directory)
    out: dict[str, Any] = {}
    for name, spec in (rendered.get("configs") or {}).items():
        if name in inline:
            path, content = inline[name]
            digest = hashlib.sha256(content.encode()).hexdigest()[:12]
            out[name] = {"file": path, "name": f"{spec.get('name') or name}-{digest}"}
        else:
            out[name] = dict(spec)
    return out


def _health_on(service: dict[str, Any], container_port: int, port: int) -> None:
    """The Compose file's health check asks the container's port: on the host network
    the engine listens on ``port``."""
    test = (service.get("healthcheck") or {}).get("test")
    if isinstance(test, list):
        service["healthcheck"]["test"] = [
            str(t).replace(f":{container_port}/", f":{port}/") for t in test
        ]


def _gpu_resources(service: dict[str, Any]) -> None:
    """Compose reserves GPUs as devices; Swarm knows them as generic resources
    (``node-generic-resources`` in each node's daemon.json)."""
    deploy = service.pop("deploy", None) or {}
    devices = ((deploy.get("resources") or {}).get("reservations") or {}).get("devices") or []
    count = sum(len(d.get("device_ids") or ()) or int(d.get("count") or 0) for d in devices)
    if count:
        spec = {"discrete_resource_spec": {"kind": "NVIDIA-GPU", "value": count}}
        service["deploy"] = {"resources": {"reservations": {"generic_resources": [spec]}}}


def stack_file(
    rendered: Mapping[str, Any],
    *,
    kind: str,
    container_port: int,
    port: int,
    host: str,
    placement: Placement,
    replicas: int,
    labels: Mapping[str, str],
    configs_dir: str,
) -> dict[str, Any]:
    """The stack file for ``docker stack deploy``: ``rendered`` is the engine's Compose
    file as ``compose config`` printed it (variables filled in, ``extends`` merged);
    its inline configs are read from ``configs_dir`` (see ``config_files``)."""
    try:
        service = dict(rendered["services"][SERVICE])
    except (KeyError, TypeError):
        raise StackError(f"the Compose file has no service {SERVICE!r}") from None
    for compose_only in ("ports", "restart", "container_name", "networks", "ipc", "pid"):
        service.pop(compose_only, None)
    # "VAR:" with nothing after it passes a variable through when set: Compose left
    # null where it was not, and Swarm would read null as an empty value.
    service["environment"] = {
        k: v for k, v in (service.get("environment") or {}).items() if v is not None
    }
    bind_to(kind, service, host, port)
    _health_on(service, container_port, port)
    _gpu_resources(service)
    service["networks"] = [HOST_NETWORK]
    # Where a task runs is Swarm's choice (it names the node in its own labels): the
    # Compose file's node label would name the deploying node, whose Compose runtime
    # would then take the task for one of its own projects.
    own = {k: v for k, v in (service.get("labels") or {}).items() if k != LABEL_NODE}
    service["labels"] = {**own, **labels}
    service["deploy"] = {
        **(service.get("deploy") or {}),
        "mode": "replicated",
        "replicas": replicas,
        # Each replica binds the same port on its node's loopback: one per node.
        "placement": {"constraints": placement.constraints(), "max_replicas_per_node": 1},
        "restart_policy": {"condition": "any", "delay": "1s"},
        # The old task frees the port before its replacement binds it.
        "update_config": {"order": "stop-first"},
        "labels": dict(labels),
    }
    volumes = {
        name: {"name": spec["name"]} if isinstance(spec, Mapping) and spec.get("name") else {}
        for name, spec in (rendered.get("volumes") or {}).items()
    }
    stack: dict[str, Any] = {
        "version": "3.8",
        "services": {SERVICE: service},
        "networks": {HOST_NETWORK: {"external": True, "name": "host"}},
    }
    if volumes:
        stack["volumes"] = volumes
    if configs := _stack_configs(rendered, configs_dir):
        stack["configs"] = configs
    return stack


def task_labels(*, deployment_id: str, kind: str, port: int, config_json: str) -> dict[str, str]:
    """The labels a node's agent recognises a task by (on the service and its containers)."""
    return {
        LABEL_MANAGED: "true",
        LABEL_ENGINE: kind,
        LABEL_DEPLOYMENT: deployment_id,
        LABEL_RUNTIME: "swarm",
        LABEL_PORT: str(port),
        LABEL_CONFIG: config_json,
    }
