"""How the control plane reaches a node's agent: the one place that knows transports and trust.

A node's config says how (``control.config.NodeConfig``): its agent's URL as it is, or
``transport = "ssh"``, where the system ssh client forwards a port on this machine's
loopback to the agent's loopback port on the node (``control.ssh_tunnel``). Either way every
use of the node (telemetry, engine control, node-side loads, the engine proxy and bench)
goes to :attr:`AgentLink.url`, with the TLS trust the node's config names: a CA file, a
pinned certificate fingerprint, or the system's CAs.
"""

from __future__ import annotations

import asyncio
import ssl
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from urllib.parse import urlparse

import aiohttp

from agents.client import AgentClient
from control.config import ConfigError, NodeConfig
from control.ssh_tunnel import SshTunnel

TUNNEL_UP_TIMEOUT_S = 30.0
"""How long a command waits for a node's ssh tunnel (ssh's own ConnectTimeout is 10 s)."""

Trust = ssl.SSLContext | aiohttp.Fingerprint | bool


@dataclass(frozen=True, slots=True)
class AgentLink:
    """Where this machine reaches one node's agent, and how it trusts it."""

    node: str
    url: str
    """The agent's URL from here (an ssh tunnel's forwarded port on 127.0.0.1)."""
    trust: Trust
    tunnel: SshTunnel | None = None

    def client(self, token: str) -> AgentClient:
        return AgentClient(self.url, token, ssl_context=self.trust)


def trust(node: NodeConfig) -> Trust:
    """The TLS check for the node's agent: its pinned certificate, its CA, or the system's."""
    if node.fingerprint is not None:
        return aiohttp.Fingerprint(bytes.fromhex(node.fingerprint.removeprefix("sha256:")))
    if node.ca is None:
        return True
    try:
        context = ssl.create_default_context(cafile=str(node.ca))
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"node {node.name!r}: cannot read its CA file {node.ca}: {exc}") from exc
    if node.transport == "ssh":
        context.check_hostname = False  # the name is 127.0.0.1 here; ssh vouched for the host
    return context


def agent_link(node: NodeConfig) -> AgentLink:
    """The node's link, its tunnel not started yet (``SshTunnel.start``)."""
    if node.transport != "ssh":
        return AgentLink(node.name, node.url, trust(node))
    assert node.ssh is not None  # the config refuses an ssh node without a destination
    where = urlparse(node.url)
    assert where.hostname is not None and where.port is not None
    tunnel = SshTunnel(node.ssh, where.hostname, where.port, config_file=node.ssh_config)
    url = f"{where.scheme}://127.0.0.1:{tunnel.local_port}"
    return AgentLink(node.name, url, trust(node), tunnel)


@asynccontextmanager
async def opened(node: NodeConfig) -> AsyncIterator[AgentLink]:
    """The node's link, its tunnel up until the block ends (a command's lifetime);
    ``control.ssh_tunnel.TunnelError`` with ssh's reason when it does not come up."""
    link = agent_link(node)
    if link.tunnel is None:
        yield link
        return
    try:
        await link.tunnel.wait_up(TUNNEL_UP_TIMEOUT_S)
        yield link
    finally:
        await link.tunnel.close()


@asynccontextmanager
async def reaching_back(tunnel: SshTunnel, url: str) -> AsyncIterator[str]:
    """``url`` (an agent this machine reaches) as the node at the far end of ``tunnel``
    reaches it: through a second ssh connection to that node carrying a remote forward
    back here, up until the block ends."""
    where = urlparse(url)
    assert where.hostname is not None and where.port is not None  # an agent URL has both
    back = tunnel.sibling((where.hostname, where.port))
    try:
        await back.wait_up(TUNNEL_UP_TIMEOUT_S)
        assert back.node_port is not None  # up: ssh said which port the node gave
        yield f"{where.scheme}://127.0.0.1:{back.node_port}"
    finally:
        await back.close()


@contextmanager
def held(node: NodeConfig) -> Iterator[AgentLink]:
    """``opened`` for a synchronous command whose parts run in loops of their own (bench):
    the tunnel lives in a loop on a thread of its own until the block ends."""
    link = agent_link(node)
    if link.tunnel is None:
        yield link
        return
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name=f"ssh {node.name}", daemon=True)
    thread.start()
    try:
        asyncio.run_coroutine_threadsafe(link.tunnel.wait_up(TUNNEL_UP_TIMEOUT_S), loop).result()
        yield link
    finally:
        asyncio.run_coroutine_threadsafe(link.tunnel.close(), loop).result()
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        loop.close()


@asynccontextmanager
async def connected(node: NodeConfig) -> AsyncIterator[AgentClient]:
    """A client for the node's agent (its token read now) over its link."""
    token = node.read_token()
    async with opened(node) as link, link.client(token) as client:
        yield client
