"""A node as the control plane holds it: the agent client it talks to, or why there is none."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from agents.protocol import EngineInfo, ModelInventory, ModelPull, NodeInfo, ServiceInfo
from control.ssh_tunnel import SshTunnel
from telemetry import TelemetryFrame

LaunchFields = dict[str, object]
"""An engine's launch config as the agent's API takes it (JSON: ``engines.catalog.LaunchConfig``'s
fields; a simulated engine's ``profile``)."""


class AgentLike(Protocol):
    """What the control plane needs of ``agents.client.AgentClient`` (tests may hand in
    another client with these methods)."""

    async def node_info(self) -> NodeInfo: ...

    def stream(
        self, since_seq: int | None = None, *, reconnect: bool = True
    ) -> AsyncIterator[TelemetryFrame]: ...

    async def engines(self) -> Sequence[EngineInfo]: ...

    async def listing(self) -> tuple[Sequence[EngineInfo], Sequence[ServiceInfo]]: ...

    async def models(self) -> ModelInventory: ...

    async def pull_model(
        self,
        model: str,
        *,
        revision: str | None = None,
        engine: str | None = None,
        quant: str | None = None,
        hub_token: str | None = None,
    ) -> ModelPull: ...

    def follow_pull(self, pull_id: str) -> AsyncIterator[ModelPull]: ...

    async def cancel_pull(self, pull_id: str) -> ModelPull: ...

    async def start(
        self,
        kind: str,
        config: LaunchFields,
        gpus: list[int] | None = None,
        *,
        runtime: str | None = None,
        options: LaunchFields | None = None,
        wait: bool = True,
        health_timeout_s: float | None = None,
    ) -> EngineInfo: ...

    async def stop(self, engine_id: str, remove_volumes: Sequence[str] = ()) -> EngineInfo: ...

    async def scale(self, engine_id: str, replicas: int) -> EngineInfo: ...

    async def swap(
        self,
        engine_id: str,
        config: LaunchFields,
        *,
        kind: str | None = None,
        health_timeout_s: float | None = None,
    ) -> EngineInfo: ...

    def logs(self, engine_id: str, tail: int = 200, follow: bool = False) -> AsyncIterator[str]: ...

    async def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class NodeHandle:
    name: str
    url: str
    client: AgentLike | None
    error: str | None = None
    """Why there is no client (a config error the Fleet screen shows in words)."""
    token: str | None = field(default=None, repr=False)
    """The agent's bearer token: the API key of its engine proxy (``control.loads``)."""
    tunnel: SshTunnel | None = None
    """The ssh tunnel ``url`` goes through (``control.transport``): its state is shown per
    node, and the agent's 127.0.0.1 URL is the node's, not this machine's."""
