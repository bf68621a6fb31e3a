"""Build :class:`Services` from a :class:`Config` with the real parts.

One agent client per configured node; with no node, an embedded agent serves
this machine.  The store opens at the configured path; load tests run through
the load generator in a subprocess.
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from agents.client import AgentClient
from agents.config import AgentConfig
from control.config import Config, ConfigError, NodeConfig
from control.loads import run_load
from control.nodes import NodeHandle
from control.services import Services
from control.transport import agent_link
from store import open_store


def node_handles(config: Config) -> list[NodeHandle]:
    """One handle per configured node, over its link (``control.transport``); its ssh
    tunnel, if any, not started yet."""
    return [node_handle(node) for node in config.nodes]


def node_handle(node: NodeConfig) -> NodeHandle:
    """The node's handle over its link, or why it has none (a config error in words)."""
    try:
        token = node.read_token()
        link = agent_link(node)
    except ConfigError as exc:
        return NodeHandle(node.name, node.url, None, error=str(exc))
    client = link.client(token)
    return NodeHandle(node.name, link.url, client, token=token, tunnel=link.tunnel)


def _own(services: Services, handle: NodeHandle) -> None:
    """The handle's client closes and its tunnel (started now) ends with the services."""
    if handle.client is not None:
        services.exit_stack.push_async_callback(handle.client.close)
    if handle.tunnel is not None:
        handle.tunnel.start()
        services.exit_stack.push_async_callback(handle.tunnel.close)


def join_node(services: Services, node: NodeConfig) -> NodeHandle | None:
    """A node added while the services run (``node add`` from the TUI): its handle, or
    None where one of that name is there already (an upgrade in place keeps its link)."""
    if services.node(node.name) is not None:
        return None
    handle = node_handle(node)
    _own(services, handle)
    services.nodes = (*services.nodes, handle)
    return handle


@asynccontextmanager
async def build_services(
    config: Config, *, agent_config: AgentConfig | None = None
) -> AsyncIterator[Services]:
    """Services for ``config``; everything started here is stopped on exit."""
    services = Services()
    async with services.exit_stack:
        store = open_store(config.db_path, on_error=services.report_store_error)
        services.exit_stack.callback(store.close)
        services.store = store
        services.load_runner = run_load
        handles = node_handles(config)
        if config.embedded:
            handles.append(await _embedded(services, agent_config))
        for h in handles:
            _own(services, h)
        services.nodes = tuple(handles)
        yield services


async def _embedded(services: Services, agent_config: AgentConfig | None) -> NodeHandle:
    """This machine, through an agent started in-process on 127.0.0.1."""
    from agents.embedded import embedded_agent

    config = agent_config or AgentConfig(token=secrets.token_urlsafe(32), port=0)
    url, token = await services.exit_stack.enter_async_context(embedded_agent(config))
    return NodeHandle(config.node_name, url, AgentClient(url, token), token=token)
