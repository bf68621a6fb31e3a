"""Engines as Docker Swarm services: ``docker stack deploy`` of the engine's own Compose
file (see :mod:`agents.runtime.swarm_stack`), placed by node name or node label, with
replicas and Swarm's restart policy.

Two roles, one runtime.  On a manager node the agent deploys, scales and removes the
stack ``infer-<id>`` (the service itself is not this node's engine: Swarm places it;
the agent lists it as a service, with Swarm's word on its replicas: ``swarm_services``).
On every node the agent finds the tasks Swarm runs there by their ``org.infer-top.*``
labels and lists each as a deployment of this node (the manager hears of them through
:meth:`SwarmRuntime.watch_tasks`): so the fleet shows each replica under its node, and
a task Swarm restarts or moves shows where it runs now.  Docker's event stream is the
node's own: a daemon reports only the containers it runs."""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
import threading
import time
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any

import yaml

from agents.catalog_adapter import UnknownEngine, get_spec
from agents.protocol import ServiceInfo
from agents.runtime import Deployment, ExitCallback, RuntimeError_, TaskCallback
from agents.runtime.compose import ComposeRuntime, command_lines, run_command
from agents.runtime.state import deployment_from_record
from agents.runtime.swarm_services import ServiceTasks, service_tasks
from agents.runtime.swarm_stack import (
    LABEL_CONFIG,
    LABEL_PORT,
    LABEL_RUNTIME,
    SERVICE,
    Placement,
    StackError,
    bind_to,
    checked_replicas,
    config_files,
    stack_file,
    task_labels,
)
from agents.security import SECRET_CONFIG_KEYS, open_private, private_dir, redacted
from compose import LABEL_DEPLOYMENT, LABEL_ENGINE

log = logging.getLogger(__name__)

_NOT_MANAGER = "not a swarm manager"
_ASK_SWARM_S = 10.0
"""Bound on asking Docker for the services' tasks: an engine list never hangs on it."""


class SwarmRuntime(ComposeRuntime):
    """Compose's rendering and Docker client, Swarm's deployment."""

    name = "swarm"
    deploys_services = True
    """The manager lists what it deploys as services; the nodes list the tasks they run."""

    def service(self, dep: Deployment) -> str:
        return f"{dep.project}_{SERVICE}"

    def _configs_dir(self, dep: Deployment) -> Path:
        """Where the stack's inline configs are written (``config_files``)."""
        return Path(self.state.dir) / f"{dep.id}.configs"

    def _stack(self, dep: Deployment, rendered: dict[str, Any]) -> dict[str, Any]:
        spec = get_spec(dep.kind)
        try:
            return stack_file(
                rendered,
                kind=dep.kind,
                container_port=spec.container_port,
                port=int(dep.port or spec.container_port),
                host=dep.host,
                placement=Placement.from_option(dep.options.get("placement")),
                replicas=checked_replicas(dep.options.get("replicas")),
                labels=task_labels(
                    deployment_id=dep.id,
                    kind=dep.kind,
                    port=int(dep.port or spec.container_port),
                    # Secrets never go into labels (any node's `docker inspect` shows them).
                    config_json=json.dumps(
                        {k: v for k, v in dep.config.items() if k not in SECRET_CONFIG_KEYS},
                        sort_keys=True,
                    ),
                ),
                configs_dir=str(self._configs_dir(dep)),
            )
        except StackError as exc:
            raise RuntimeError_(f"cannot deploy {dep.kind} on Swarm: {exc}") from exc

    def check(self, dep: Deployment) -> None:
        self.render(dep)
        try:
            Placement.from_option(dep.options.get("placement"))
            checked_replicas(dep.options.get("replicas"))
        except StackError as exc:
            raise RuntimeError_(str(exc)) from exc
        try:  # an engine it cannot bind to the loopback is refused before anything runs
            bind_to(dep.kind, {"command": []}, dep.host, int(dep.port or 0))
        except StackError as exc:
            raise RuntimeError_(str(exc)) from exc
        if dep.config.get("api_key") and get_spec(dep.kind).api_key_env is None:
            raise RuntimeError_(
                f"{dep.kind} takes its API key as a flag, which the agents of the nodes "
                "running its replicas cannot read back to reach it: run it keyed with the "
                "compose runtime, or without a key on Swarm"
            )

    async def _docker_cli(self, *args: str, timeout_s: float = 120) -> str:
        """The ``docker`` CLI (stack and service commands have no SDK call), on the
        daemon this agent uses (``DOCKER_HOST``, inherited)."""
        code, out = await run_command(
            ["docker", *args],
            what=f"docker {args[0]} {args[1]}",
            cwd=self.state.dir,
            timeout_s=timeout_s,
        )
        text = out.strip()
        if code != 0:
            tail = "\n".join(text.splitlines()[-4:])
            if _NOT_MANAGER in text or "not a manager" in text:
                raise RuntimeError_(
                    f"node {self.node} is not a Swarm manager: ask the agent of a manager "
                    f"node ({tail})"
                )
            raise RuntimeError_(f"docker {args[0]} {args[1]} failed: {tail}")
        return text

    async def stack_for(self, dep: Deployment) -> Path:
        """Write the stack file of ``dep`` (beside its record) and return its path."""
        path, env = self.render(dep)
        self.state.save(dep, compose_file=str(path), env=env)
        rendered = yaml.safe_load(await self._compose(dep, "config", env=env))
        stack_path = Path(self.state.dir) / f"{dep.id}.stack.yml"
        stack_path.touch(mode=0o600)  # the engine's environment may hold its API key
        stack = self._stack(dep, rendered)
        if inline := config_files(rendered, str(self._configs_dir(dep))):
            private_dir(self._configs_dir(dep))
            for config_path, content in inline.values():
                with open_private(Path(config_path), "w") as fh:
                    fh.write(content)
        stack_path.write_text(yaml.safe_dump(stack, sort_keys=False))
        return stack_path

    async def start(self, dep: Deployment) -> None:
        try:
            stack_path = await self.stack_for(dep)
            # The images must be on the node Swarm picks: no registry is asked.
            await self._docker_cli(
                "stack", "deploy", "--resolve-image", "never", "-c", str(stack_path), dep.project
            )
        except RuntimeError_:
            self.state.remove(dep.id)
            raise
        placement = Placement.from_option(dep.options.get("placement")).describe()
        replicas = checked_replicas(dep.options.get("replicas"))
        dep.message = (
            f"Swarm service {self.service(dep)}: {replicas} replica(s) on {placement}; "
            "each node's agent lists the replica it runs"
        )

    async def scale(self, dep: Deployment, replicas: int) -> None:
        try:
            replicas = checked_replicas(replicas)
        except StackError as exc:
            raise RuntimeError_(str(exc)) from exc
        await self._docker_cli("service", "scale", "--detach", f"{self.service(dep)}={replicas}")
        dep.options["replicas"] = replicas
        record = self.state.load(dep.id)
        if record is not None:
            self.state.save(dep, **{k: record[k] for k in ("compose_file", "env") if k in record})

    async def stop(self, dep: Deployment, timeout_s: float) -> None:
        # "stack rm" removes the service and its network, never a volume: the engine's
        # named volume is the node's model cache.
        await self._docker_cli("stack", "rm", dep.project)
        self.state.remove(dep.id)
        (Path(self.state.dir) / f"{dep.id}.stack.yml").unlink(missing_ok=True)
        shutil.rmtree(self._configs_dir(dep), ignore_errors=True)

    def forget(self, dep: Deployment) -> str:
        self.state.remove(dep.id)
        return f"its Swarm stack may remain: `docker stack rm {dep.project}` on a manager"

    def deployed(self, dep_id: str) -> Deployment | None:
        """A service this agent deployed (its record), to stop or scale it from here."""
        record = self.state.load(dep_id)
        if record is None or record.get("runtime") != self.name:
            return None
        dep = deployment_from_record(record)
        dep.state, dep.health = "deployed", "unknown"
        return dep

    async def services(self) -> list[ServiceInfo]:
        """The services this agent deployed (its records), with the replicas Swarm is
        asked for and the nodes their running tasks are on."""
        records = self.state.all(self.name)
        if not records:
            return []
        try:
            swarm: dict[str, ServiceTasks] | None = await asyncio.wait_for(
                asyncio.to_thread(lambda: service_tasks(self.docker)), _ASK_SWARM_S
            )
            unknown = ""
        except Exception as exc:  # not a manager any more, Docker gone or slow
            swarm, unknown = None, f"Swarm did not say how many replicas run ({exc})"
        found = []
        for record in records:
            dep = deployment_from_record(record)
            name = self.service(dep)
            tasks = None if swarm is None else swarm.get(name)
            asked = checked_replicas(dep.options.get("replicas"))
            if swarm is not None and tasks is None:
                state = "missing"
                message = (
                    f"Swarm has no service {name} (removed outside infer-top?): "
                    "stop it here to forget it"
                )
            else:
                state, message = "deployed", unknown or f"Swarm service {name}"
            found.append(
                ServiceInfo(
                    id=dep.id,
                    kind=dep.kind,
                    runtime=self.name,
                    state=state,
                    replicas=asked if tasks is None else tasks.replicas,
                    running=None if tasks is None else len(tasks.nodes),
                    nodes=() if tasks is None else tasks.nodes,
                    placement=Placement.from_option(dep.options.get("placement")).describe(),
                    port=dep.port,
                    config=redacted(dep.config),
                    message=message,
                )
            )
        return found

    def _containers(self, dep: Deployment) -> list[Any]:
        filters = {"label": [f"{LABEL_RUNTIME}=swarm", f"{LABEL_DEPLOYMENT}={dep.id}"]}
        return list(self.docker.containers.list(all=True, filters=filters))

    async def logs(self, dep: Deployment, tail: int, follow: bool) -> AsyncIterator[str]:
        """This node's replica where one runs here, else the service's (on a manager)."""
        running = [
            c for c in await asyncio.to_thread(self._containers, dep) if c.status == "running"
        ]
        what = ["logs", "--tail", str(tail)]
        if follow:
            what.append("-f")
        if running:
            argv = ["docker", "container", *what, running[0].id]
        else:
            argv = ["docker", "service", *what, "--raw", self.service(dep)]
        async for line in command_lines(argv):
            yield line

    def _owns(self, labels: dict[str, str]) -> bool:
        """A Swarm task's container: Swarm, not this agent, named the node it runs on."""
        return labels.get(LABEL_RUNTIME) == "swarm"

    async def adopt(self) -> list[Deployment]:
        """The tasks running on this node now (a task that ended is Swarm's history)."""
        filters = {"label": [f"{LABEL_RUNTIME}=swarm"], "status": "running"}
        containers = await asyncio.to_thread(
            lambda: list(self.docker.containers.list(filters=filters))
        )
        found: dict[str, Deployment] = {}
        for c in containers:
            dep = task_deployment(c.labels)
            if dep is not None:
                found[dep.id] = keyed(dep, c.attrs["Config"].get("Env") or ())
        return list(found.values())

    def _environment(self, container: str) -> list[str]:
        """A task container's environment (blocking), empty where it is gone already."""
        try:
            env: list[str] = self.docker.containers.get(container).attrs["Config"]["Env"]
        except Exception as exc:  # removed between its start and this look
            log.debug("cannot inspect task container %s: %s", container, exc)
            return []
        return env or []

    def watch(self, on_exit: ExitCallback) -> Callable[[], None] | None:
        return None  # tasks come and go through watch_tasks

    def watch_tasks(self, on_task: TaskCallback) -> Callable[[], None] | None:
        try:
            stream = self.docker.events(
                decode=True,
                filters={
                    "type": "container",
                    "event": ["start", "kill", "die", "stop"],
                    "label": [f"{LABEL_RUNTIME}=swarm"],
                },
            )
        except Exception as exc:  # no daemon: nothing to follow
            log.warning("no Docker events (%s): Swarm tasks on this node are not followed", exc)
            return None

        def pump() -> None:
            # Containers sent their stop signal (Swarm stops a task with it, then SIGKILL
            # after the grace period): their exit is an ending, not a crash.
            stopping: set[str] = set()
            try:
                for event in stream:
                    attrs = event.get("Actor", {}).get("Attributes", {})
                    dep = task_deployment(attrs)
                    if dep is None:
                        continue
                    at = float(event.get("timeNano", 0)) / 1e9 or time.time()
                    action, name = str(event.get("Action")), attrs.get("name", "?")
                    container = str(event.get("Actor", {}).get("ID", ""))
                    code = attrs.get("exitCode")
                    exit_code = int(code) if str(code).lstrip("-").isdigit() else None
                    if action == "kill":
                        if attrs.get("signal") != "9" and len(stopping) < 1024:
                            stopping.add(container)
                        continue
                    if action == "start":
                        reason = f"Swarm started task {name} on node {self.node}"
                        dep = keyed(dep, self._environment(container))
                    elif action == "die" and container in stopping:
                        action, reason = "ending", f"Swarm is stopping task {name}"
                    elif action == "die":
                        reason = f"task {name} exited (code {code})"
                    else:  # "stop": Swarm ended it (drain, scale-down, update, removal)
                        stopping.discard(container)
                        reason = f"Swarm stopped task {name} on node {self.node}"
                    on_task(action, dep, reason, at, exit_code)
            except Exception as exc:  # closed by unwatch, or the daemon went away
                log.debug("docker events ended: %s", exc)

        thread = threading.Thread(target=pump, daemon=True, name="swarm-events")
        thread.start()
        return stream.close  # type: ignore[no-any-return]


def task_deployment(labels: dict[str, str]) -> Deployment | None:
    """A task's deployment as its labels tell it (the service's launch settings without
    secrets: ``keyed`` adds the engine's API key from its container)."""
    dep_id, kind = labels.get(LABEL_DEPLOYMENT), labels.get(LABEL_ENGINE)
    if not dep_id or not kind or labels.get(LABEL_RUNTIME) != "swarm":
        return None
    try:
        config = json.loads(labels.get(LABEL_CONFIG) or "{}")
        port = int(labels.get(LABEL_PORT) or 0) or None
    except ValueError:
        config, port = {}, None
    return Deployment(
        id=dep_id,
        kind=kind,
        runtime="swarm",
        config=config if isinstance(config, dict) else {},
        port=port,
        state="loading",
        health="loading",
    )


def keyed(dep: Deployment, environment: Sequence[str]) -> Deployment:
    """``dep`` with the engine's own API key, read from its task container's environment
    (``KEY=VALUE`` entries) in the variable its spec takes it from: labels never carry
    the key, and the node's agent needs it to health-check, measure and proxy the engine."""
    try:
        variable = get_spec(dep.kind).api_key_env
    except UnknownEngine:
        return dep
    prefix = f"{variable}="
    for entry in environment if variable else ():
        if entry.startswith(prefix) and entry != prefix:
            dep.config["api_key"] = entry[len(prefix) :]
    return dep
