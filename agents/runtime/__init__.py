"""Engine runtimes: how a deployment is brought up, stopped, watched and found
again.  Docker Compose for containers, plain processes for natively installed
engines (llama-server, ollama), in-process simulators for the demo.  The
manager drives all of them through :class:`Runtime`."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from agents.protocol import EngineInfo, ImagePull, KvCapacity, ServiceInfo, config_model
from agents.security import redacted


@dataclass(slots=True)
class Deployment:
    """The agent's own record of one engine it runs (mutable; EngineInfo is its snapshot)."""

    id: str
    kind: str
    runtime: str
    config: dict[str, Any]
    gpu_ids: tuple[int, ...] = ()
    options: dict[str, Any] = field(default_factory=dict)
    """Checked deployment options (``model_dir``: the host directory mounted for models)."""
    port: int | None = None
    host: str = "127.0.0.1"
    state: str = "starting"
    health: str = "unknown"
    simulated: bool = False
    started_at: float = field(default_factory=time.time)
    message: str | None = None
    healthy_at: float | None = None
    """Epoch s of the last good health answer (the gate, then the manager's health watch)."""
    exit_code: int | None = None
    start_timeout_s: float | None = None
    """The health gate's limit (see EngineInfo); None: the engine spec's."""
    last_log_line: str | None = None
    volumes: tuple[str, ...] = ()
    """Named volumes it mounts, as its runtime found them after the start or adoption."""
    engine_version: str | None = None
    """The running engine's version (see EngineInfo); its metrics are read in its dialect."""
    engine_version_from: str | None = None
    image_pull: ImagePull | None = None
    """Its image as the start found it (Compose): present, or the pull's progress."""
    kv_capacity: KvCapacity | None = None
    """What the engine states of its KV capacity beside the estimate (``agents.kv_check``)."""
    handle: Any = None
    """Runtime-private: a Popen, a simulator, a Compose project name."""

    @property
    def url(self) -> str | None:
        return None if self.port is None else f"http://{self.host}:{self.port}"

    @property
    def model(self) -> str | None:
        return config_model(self.config)

    @property
    def project(self) -> str:
        return f"infer-{self.id}"

    def info(self) -> EngineInfo:
        return EngineInfo(
            id=self.id,
            kind=self.kind,
            runtime=self.runtime,
            state=self.state,
            health=self.health,
            url=self.url,
            port=self.port,
            gpu_ids=self.gpu_ids,
            config=redacted(self.config),
            simulated=self.simulated,
            started_at=self.started_at,
            message=self.message,
            healthy_at=self.healthy_at,
            exit_code=self.exit_code,
            start_timeout_s=self.start_timeout_s,
            last_log_line=self.last_log_line,
            volumes=self.volumes,
            engine_version=self.engine_version,
            engine_version_from=self.engine_version_from,
            image_pull=self.image_pull,
            kv_capacity=self.kv_capacity,
        )


class RuntimeError_(Exception):
    """A runtime could not do what was asked; the message is the operator's explanation."""


class ExitCallback(Protocol):
    """The runtime saw an engine exit on its own (or, ``restarted``, come back by itself:
    a restart policy or an operator's ``docker start``).  ``at`` (epoch s) lets the
    manager ignore the death of an engine it already replaced; ``exit_code`` where known."""

    def __call__(
        self,
        dep_id: str,
        reason: str,
        at: float,
        *,
        restarted: bool = False,
        exit_code: int | None = None,
    ) -> None: ...


class TaskCallback(Protocol):
    """A runtime whose engines an orchestrator places (Swarm) saw one of its tasks on this
    node ``start``, ``die`` (crash: the orchestrator restarts it), ``ending`` (exiting on
    the orchestrator's stop signal) or ``stop`` (ended by the orchestrator: moved, scaled
    down or removed).  ``dep`` is built from the task's labels."""

    def __call__(
        self, action: str, dep: Deployment, reason: str, at: float, exit_code: int | None
    ) -> None: ...


class Runtime(Protocol):
    name: str

    def check(self, dep: Deployment) -> None:
        """Raise RuntimeError_ with the reason ``start`` would refuse ``dep`` (what it
        renders, a missing binary), before anything runs: a refused start leaves no
        record and a refused swap stops nothing."""

    async def start(self, dep: Deployment) -> None:
        """Bring the engine up (not yet healthy); raise RuntimeError_ with the reason."""

    async def stop(self, dep: Deployment, timeout_s: float) -> None: ...

    def forget(self, dep: Deployment) -> str:
        """Drop what it keeps of ``dep`` (its record) after a stop it could not carry out
        on a dead engine; returns what may be left behind and how to remove it, in words."""

    async def status(self, dep: Deployment) -> str:
        """running | exited | missing"""

    async def exit_code(self, dep: Deployment) -> int | None:
        """How the engine ended, where it has and the runtime can tell; else None."""

    def logs(self, dep: Deployment, tail: int, follow: bool) -> AsyncIterator[str]: ...

    async def adopt(self) -> list[Deployment]:
        """Deployments of this node left by an earlier agent: running ones, and ones that
        died meanwhile as state "crashed" (``message`` and ``exit_code`` say how), so an
        operator can inspect and remove what they left (containers, networks, records)."""

    def watch(self, on_exit: ExitCallback) -> Callable[[], None] | None:
        """Start reporting exits; returns a function that stops watching (or None)."""


@runtime_checkable
class VolumeRuntime(Protocol):
    """A runtime whose deployments mount named volumes (Compose), which a stop keeps and
    an operator's explicit "remove with data" removes."""

    async def volume_users(self, name: str, dep: Deployment) -> list[str]:
        """Containers other than ``dep``'s that use the volume, in words."""

    async def remove_volumes(self, names: Sequence[str]) -> None:
        """Remove the volumes; RuntimeError_ naming the first that cannot go."""


@runtime_checkable
class TaskRuntime(Protocol):
    """A runtime that deploys services an orchestrator places (``deploys_services``): the
    agent that deploys one lists it as a service; each node lists the tasks it runs."""

    deploys_services: bool

    def deployed(self, dep_id: str) -> Deployment | None:
        """A service this agent deployed, from its record (to stop or scale it here)."""

    async def scale(self, dep: Deployment, replicas: int) -> None: ...

    async def services(self) -> list[ServiceInfo]:
        """The services this agent deployed, with the replicas the orchestrator runs."""

    def watch_tasks(self, on_task: TaskCallback) -> Callable[[], None] | None:
        """Start reporting this node's tasks; returns a function that stops it (or None)."""


@runtime_checkable
class PidOwner(Protocol):
    """A runtime whose deployments run as host processes the GPU lists name."""

    def owner_of(self, pid: int) -> str | None:
        """The id of this runtime's deployment that runs process ``pid``, else None.
        Blocking (reads /proc, may ask Docker): called off the event loop."""
