"""``/v1/engines/{id}/proxy/{tail}``: an engine's own API, reached through its agent.

Engines bind their node's loopback, so a client on another machine (the control plane's
load generator, an operator's curl, an OpenAI SDK) reaches one through the agent, with the
agent's bearer token (checked by the auth middleware like every other route). The proxy
forwards only to that deployment's own URL, never to a host the request names: it is not
an open proxy. The engine's API key, where the deployment has one, replaces the caller's
Authorization header. Bodies stream both ways (SSE arrives as the engine writes it: each
block the engine sends goes out to the client as it comes, ``agents.relay``); a client
that reads slowly stops the engine's connection being read (back-pressure), and a client
that goes away closes the upstream connection, which is how engines notice a cancelled
request.

Every proxied request costs the agent's host a few loopback sends and, for an engine that
closes after each answer, a connect (benchmarks/proxy_bench.py): connections to an engine
that keeps them are pooled, one to an engine that does not is opened ahead of the request
that takes it, and the answer's head goes out with its first bytes.  (Both sides' sockets
are TCP_NODELAY: asyncio sets it on every TCP connection.)
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

from aiohttp import web
from aiohttp.web_log import AccessLogger
from aiohttp.web_request import BaseRequest
from yarl import URL

from agents.catalog_adapter import get_spec
from agents.http1 import HOP_BY_HOP, RelayError
from agents.keys import MANAGER
from agents.manager import ManagerError
from agents.relay import EngineConnection, EnginePool

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 10.0
"""An engine on the node's loopback connects at once or not at all; reading has no limit
(a long generation is the caller's to time out)."""

WHOLE_BODY_BYTES = 1 << 20
"""A request body up to this size (every chat or completion request) is read whole and sent
upstream in one write with its length; a larger or unsized one streams through chunked."""

ENGINES = web.AppKey("proxy_engines", EnginePool)


def _target(request: web.Request) -> tuple[str, tuple[str, int], bool, bytes]:
    """The deployment's own engine address (host and port from the agent's record, never
    from the request), whether its connections are opened ahead (an engine that closes
    after each answer), and the request's head as the engine gets it."""
    dep = request.app[MANAGER].get(request.match_info["id"])  # unknown id: 404
    if dep.url is None:
        raise ManagerError(409, f"engine {dep.id} has no address yet (state {dep.state})")
    engine = URL(dep.url)
    assert engine.host is not None and engine.port is not None
    # The tail as the client encoded it: /v1/engines/<id>/proxy<tail> (an id has no "/").
    tail = request.raw_path.split("/", 4)[4].removeprefix("proxy") or "/"
    lines = [f"{request.method} {tail} HTTP/1.1", f"Host: {engine.host}:{engine.port}"]
    for name, value in request.headers.items():
        key = name.lower()
        if key not in HOP_BY_HOP and key != "authorization":
            lines.append(f"{name}: {value}")
    api_key = dep.config.get("api_key")
    if api_key:
        lines.append(f"Authorization: Bearer {api_key}")
    # Back to the bytes the client sent (aiohttp decoded them so, undecodable ones kept).
    head = "\r\n".join(lines).encode("utf-8", "surrogateescape")
    ahead = get_spec(dep.kind).closes_after_stream
    return dep.id, (engine.host, engine.port), ahead, head


async def _send(request: web.Request, conn: EngineConnection, head: bytes) -> None:
    """The request to the engine: a body with a length in one write, a larger or unsized
    one as chunks while it arrives."""
    length = request.content_length
    if not request.body_exists:
        conn.send(request.method, head + b"\r\nContent-Length: 0\r\n\r\n"
                  if request.method == "POST" else head + b"\r\n\r\n")  # fmt: skip
    elif length is not None and length <= WHOLE_BODY_BYTES:
        body = await request.read()
        conn.send(request.method, b"%s\r\nContent-Length: %d\r\n\r\n%s" % (head, len(body), body))
    else:
        conn.send(request.method, head + b"\r\nTransfer-Encoding: chunked\r\n\r\n")
        assert conn.transport is not None
        async for chunk in request.content.iter_any():
            conn.transport.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        conn.transport.write(b"0\r\n\r\n")


class _Relayed(web.StreamResponse):
    """An engine's answer on its way out, framed as the engine framed it: the head waits for
    the first body bytes, so both leave in one send, and the body is not re-framed here
    (aiohttp's own length and chunk handling is off, as for its WebSockets)."""

    _send_headers_immediately = False
    _length_check = False


def _no_answer(dep_id: str, key: tuple[str, int], exc: RelayError) -> ManagerError:
    return ManagerError(502, f"engine {dep_id} at http://{key[0]}:{key[1]} did not answer: {exc}")


async def proxy(request: web.Request) -> web.StreamResponse:
    dep_id, key, ahead, head = _target(request)
    pool = request.app[ENGINES]
    try:
        conn = await pool.take(key, ahead=ahead)
    except RelayError as exc:
        raise _no_answer(dep_id, key, exc) from None
    finished = False
    response: web.StreamResponse | None = None
    try:
        await _send(request, conn, head)
        assert conn.head is not None and conn.done is not None
        try:
            answer = await conn.head
        except RelayError as exc:
            raise _no_answer(dep_id, key, exc) from None
        response = _Relayed(status=answer.status, reason=answer.reason, headers=answer.headers)
        if answer.framing in ("chunked", "close"):
            response.headers["Transfer-Encoding"] = "chunked"
        elif answer.framing == "length":
            response.headers["Content-Length"] = str(answer.length)
        writer = await response.prepare(request)
        assert writer is not None and request.transport is not None
        first = conn.take_pending()
        if first:
            await response.write(first)  # with the head, in one send
        else:
            writer.send_headers()  # nothing yet: the client gets the status now
        conn.attach(request.transport, lambda: asyncio.ensure_future(writer.drain()))
        try:
            await conn.done
        except RelayError as exc:
            # The status is sent: cut the client's connection so the stream ends in an
            # error there too, not in a clean (and silently short) end.
            log.warning("engine %s stopped mid-answer: %s", dep_id, exc)
            request.transport.close()
            return response
        if answer.framing == "close":
            request.transport.write(b"0\r\n\r\n")
        await response.write_eof()
        # An engine that closes after each answer may not have closed yet: never reused.
        finished = answer.reuse and not ahead
        return response
    except ConnectionResetError:
        log.info("the client of engine %s went away: the engine's request is closed", dep_id)
        return response or web.Response(status=499)  # never sent: the client is gone
    finally:
        # An unfinished answer drops the connection so the engine sees the request
        # cancelled (llama-server frees its slot); a finished one goes back to the pool
        # where the engine keeps its connections.
        if finished:
            pool.give_back(key, conn)
        else:
            conn.close()


async def _engine_pool(app: web.Application) -> AsyncIterator[None]:
    pool = EnginePool(asyncio.get_running_loop(), CONNECT_TIMEOUT_S)
    app[ENGINES] = pool
    try:
        yield
    finally:
        await pool.close()


class AgentAccessLogger(AccessLogger):
    """aiohttp's access log, less the proxied requests unless DEBUG is on: a load test
    through the proxy sends thousands a minute, each line cost the agent about 0.7 ms
    (benchmarks/proxy_bench.py), and the engine's own log and the run's records say more."""

    def log(self, request: BaseRequest, response: web.StreamResponse, time: float) -> None:
        quiet = not self.logger.isEnabledFor(logging.DEBUG)
        route = getattr(getattr(request, "match_info", None), "route", None)
        if quiet and getattr(route, "handler", None) is proxy:
            return
        super().log(request, response, time)


def add_proxy_routes(app: web.Application) -> None:
    app.cleanup_ctx.append(_engine_pool)
    for method in ("GET", "POST"):
        app.router.add_route(method, "/v1/engines/{id}/proxy/{tail:.*}", proxy)
