"""How the control plane reaches an engine an agent runs (docs/design.md, "The run path").

Engines bind their node's loopback (a node's engine is never exposed by itself), so from
another machine the control plane's load generator goes through the agent's proxy route
(``/v1/engines/{id}/proxy/...``) with the agent's token; only an agent on this machine's
own loopback (the embedded one) means the engine's URL is reachable from here as it is.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from urllib.parse import urlparse

from agents.protocol import engine_facts
from control.config import ConfigError, NodeConfig, load_config
from control.transport import AgentLink
from loadgen.quirks import known_kinds
from loadgen.runner import Target
from runs.setup import RunPath


@dataclass(frozen=True, slots=True)
class EngineRoute:
    """Where the control plane's load generator sends an engine's requests."""

    url: str
    api_key: str | None = field(repr=False)
    path: RunPath


def _is_loopback(url: str) -> bool:
    host = urlparse(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def engine_route(
    agent_url: str,
    agent_token: str | None,
    engine_id: str,
    engine_url: str,
    *,
    tunnelled: bool = False,
) -> EngineRoute:
    """An engine binds its node's loopback: from another machine it is reached through its
    agent's proxy route with the agent's token; only an agent on this machine's loopback
    (the embedded one) means the engine's own URL is reachable from here. An ssh tunnel's
    ``agent_url`` is on this machine's loopback too, but the agent (and engine) are not."""
    if _is_loopback(agent_url) and not tunnelled:
        return EngineRoute(engine_url, None, "direct")
    proxy = f"{agent_url.rstrip('/')}/v1/engines/{engine_id}/proxy/v1"
    return EngineRoute(proxy, agent_token, "proxied")


@dataclass(frozen=True, slots=True)
class Placement:
    """Where the engine runs and how the load reaches it (``runs.setup.RunSetup``'s fields)."""

    node: str | None = None
    deployment_id: str | None = None
    gpu_ids: tuple[int, ...] = ()
    path: RunPath = "direct"
    engine: Mapping[str, object] = field(default_factory=dict)
    """The engine's start options and KV check (``agents.protocol.engine_facts``)."""


def find_node(config_file: Path | None, node_name: str) -> NodeConfig:
    """The node the config file names ``node_name``; ConfigError (naming those it knows)
    when there is none."""
    config = load_config(config_file)
    node = next((n for n in config.nodes if n.name == node_name), None)
    if node is None:
        known = ", ".join(n.name for n in config.nodes) or "none"
        where = config.source or "the config file"
        raise ConfigError(f"no node {node_name!r} in {where} (nodes: {known})")
    return node


async def agent_target(
    node: NodeConfig, link: AgentLink, engine_id: str, target: Target
) -> tuple[Target, Placement]:
    """An engine named by its node (in the config file) and deployment id: ``target`` aimed
    at it over the node's ``link`` the way ``engine_route`` says, with the model (unless
    ``target`` names one) and kind its agent's record gives, and where it runs. ConfigError
    when there is no such engine."""

    token = node.read_token()
    async with link.client(token) as client:
        info = next((e for e in await client.engines() if e.id == engine_id), None)
    if info is None or info.url is None:
        raise ConfigError(f"node {node.name!r} runs no engine {engine_id!r} with an address")
    tunnelled = link.tunnel is not None
    route = engine_route(link.url, token, info.id, info.url, tunnelled=tunnelled)
    model = target.model or str(info.config.get("model") or "")
    kind = target.engine_kind
    if kind == "openai" and info.kind in known_kinds():
        kind = info.kind  # the engine's own quirks (exact output lengths...)
    target = replace(
        target,
        url=route.url,
        model=model,
        engine_kind=kind,
        api_key=route.api_key or target.api_key,
        through_proxy=route.path == "proxied",
    )
    return target, Placement(
        node.name, info.id, tuple(info.gpu_ids), route.path, engine_facts(info)
    )
