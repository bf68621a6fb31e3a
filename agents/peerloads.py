"""Load runs this node generates against an engine on another node, and this node's clock
(docs/design.md, "The run path": distributed runs).

A run split over several load nodes has each one's agent load the same engine. An engine
binds its own node's loopback, so from here it is reached through its agent's proxy route
with that agent's token, which the control plane hands over for the run (kept in memory
by the run's worker, never written down). Before anything is sent, the named agent must
answer its node and the engine with that token: the load only ever goes to an infer-agent
proxy route that accepts it, never to an address the caller makes up.

``GET /v1/clock`` answers this node's wall clock, so the control plane measures its offset
(NTP-style: its send and receive times around the node's) and aligns the start of a
distributed run (``start_at``) on each node's own clock.
"""

from __future__ import annotations

import re
import time
from typing import Any
from urllib.parse import quote, urlparse

from aiohttp import web

from agents.client import AgentClient, AgentError
from agents.loadruns import LOAD_FIELDS, LOADS, EngineWhere
from agents.manager import ManagerError
from agents.protocol import engine_facts, to_dict
from agents.routes import AUDIT_DETAILS, audited, json_response, read_body
from loadgen.runner import Target

PEER_FIELDS: dict[str, type] = {"agent_url": str, "token": str, "engine_id": str}
ENGINE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
PEER_TIMEOUT_S = 10.0


def _peer(body: dict[str, Any]) -> tuple[str, str, str]:
    """The peer agent's base URL, token and engine id; ValueError in words otherwise."""
    peer = body.get("peer")
    if not isinstance(peer, dict) or set(peer) != set(PEER_FIELDS):
        raise ValueError(f"peer must be an object with exactly {', '.join(PEER_FIELDS)}")
    if not all(isinstance(peer[k], str) and peer[k] for k in PEER_FIELDS):
        raise ValueError(f"peer's {', '.join(PEER_FIELDS)} must be non-empty strings")
    if not _base_url(peer["agent_url"]):
        raise ValueError("peer agent_url must be an agent's base URL: http(s)://host:port")
    if not ENGINE_ID.fullmatch(peer["engine_id"]):
        raise ValueError("peer engine_id must be a deployment id (letters, digits, . _ -)")
    return peer["agent_url"].rstrip("/"), peer["token"], peer["engine_id"]


def _base_url(text: str) -> bool:
    try:
        url = urlparse(text)
        url.port  # noqa: B018 - raises ValueError for a port that is not one
    except ValueError:
        return False
    extras = url.query or url.fragment or url.username or url.password
    return (
        url.scheme in ("http", "https")
        and bool(url.hostname)
        and url.path in ("", "/")
        and not extras
    )


async def peer_target(body: dict[str, Any]) -> tuple[Target, EngineWhere]:
    """The engine ``body['peer']`` names, reached through its agent's proxy; a 502 in
    words when that agent does not answer for it with the token given."""
    agent_url, token, engine_id = _peer(body)
    try:
        async with AgentClient(agent_url, token, timeout_s=PEER_TIMEOUT_S) as peer:
            node = await peer.node_info()
            engine = await peer.engine(engine_id)
    except AgentError as exc:
        raise ManagerError(
            502, f"the agent at {agent_url} did not answer for engine {engine_id}: {exc}"
        ) from None
    if engine.url is None:
        raise ManagerError(409, f"engine {engine_id} on {node.node} has no address yet")
    target = Target(
        url=f"{agent_url}/v1/engines/{quote(engine_id)}/proxy/v1",
        model=str(body.get("model") or ""),
        engine_kind=engine.kind,
        api_key=token,
        chat=body.get("chat", True),
        through_proxy=True,
    )
    if not target.model:
        raise ValueError("a load run needs 'model': the name the engine serves")
    return target, EngineWhere(
        node.node,
        engine.id,
        tuple(engine.gpu_ids),
        engine.simulated,
        "proxied",
        engine_facts(engine),
    )


@audited("load")
async def start_peer_load(request: web.Request) -> web.StreamResponse:
    body = await read_body(request, LOAD_FIELDS | {"peer": dict})
    target, where = await peer_target(body)
    run = request.app[LOADS].launch(target, where, body)
    request[AUDIT_DETAILS] = {
        "engine": where.deployment_id,
        "engine_node": where.node,
        "run_id": run.run_id,
    }
    return json_response(to_dict(run.info()), status=201)


async def clock(request: web.Request) -> web.Response:
    return json_response({"time": time.time()})


def add_peer_routes(app: web.Application) -> None:
    app.router.add_post("/v1/loads", start_peer_load)
    app.router.add_get("/v1/clock", clock)
