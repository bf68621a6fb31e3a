"""``/v1/engines/{id}/proxy/{tail}``: an engine's own API, reached through its agent.

Engines bind their node's loopback, so a client on another machine (the control plane's
load generator, an operator's curl, an OpenAI SDK) reaches one through the agent, with the
agent's bearer token (checked by the auth middleware like every other route). The proxy
forwards only to that deployment's own URL, never to a host the request names: it is not
an open proxy. The engine's API key, where the deployment has one, replaces the caller's
Authorization header. Bodies stream both ways chunk by chunk (SSE arrives as the engine
writes it); a write waits for the client to drain (back-pressure), and a client that goes
away closes the upstream connection, which is how engines notice a cancelled request.

Every proxied request costs the agent's host a few loopback sends and, for an engine that
closes after each answer, a connect (benchmarks/proxy_bench.py): connections to an engine
that keeps them are pooled, one to an engine that does not is opened ahead of the request
that takes it, the answer's head goes out with its first bytes and its last bytes with the
end of the chunked body, so a short streamed answer is one send fewer at each end.  (Both
sides' sockets are TCP_NODELAY: aiohttp sets it on every connection.)
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass

import aiohttp
from aiohttp import web
from aiohttp.client_proto import ResponseHandler
from aiohttp.client_reqrep import ClientRequest, ConnectionKey
from aiohttp.tracing import Trace
from aiohttp.web_log import AccessLogger
from aiohttp.web_request import BaseRequest
from yarl import URL

from agents.catalog_adapter import get_spec
from agents.keys import MANAGER
from agents.manager import ManagerError

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 10.0
"""An engine on the node's loopback connects at once or not at all; reading has no limit
(a long generation is the caller's to time out)."""
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "trailers",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
    }
)
"""Headers that belong to one connection, not to the message (RFC 9110, 7.6.1); the
length is recomputed by whichever side frames the body."""


POOL_IDLE_S = 2.0
"""How long a pooled connection may wait for its next request: under the 5 s after which
uvicorn (vLLM, SGLang) closes an idle one, so the proxy never sends into a socket the
engine is closing (a request body cannot be sent twice)."""


SPARE_MAX_AGE_S = 0.5
"""A spare connection unused this long is closed: llama-server drops a connection that
sends nothing for its ``--timeout`` (1 s at the least the catalog lets one set), so a
younger spare is surely still open when a request takes it."""


AHEAD_AFTER_S = 0.001
"""The spare's connect waits this long, so it never delays the send of the request whose
arrival started it."""


class AheadConnector(aiohttp.TCPConnector):
    """A new connection per request, for engines that close theirs after every streamed
    answer, with one opened ahead for each engine: a request takes the spare, so no
    connect (a syscall and a turn of a busy event loop) lies in its path, and starts the
    next one.  One, not more: each open connection holds one of llama-server's HTTP
    threads (``-np`` + 2 at the fewest), so spares must not outnumber its spare threads."""

    def __init__(self) -> None:
        super().__init__(limit=0, force_close=True)
        self._spares: dict[ConnectionKey, tuple[ResponseHandler, float]] = {}
        self._opening: dict[ConnectionKey, asyncio.Task[None]] = {}

    async def _create_connection(
        self,
        req: ClientRequest,
        traces: list[Trace],
        timeout: aiohttp.ClientTimeout,  # noqa: ASYNC109 - aiohttp's own signature
    ) -> ResponseHandler:
        spare = self._spares.pop(req.connection_key, None)
        self._open_ahead(req, timeout)
        if spare is not None:
            proto, opened_at = spare
            if proto.is_connected() and self._loop.time() - opened_at < SPARE_MAX_AGE_S:
                return proto
            proto.close()
        return await super()._create_connection(req, traces, timeout)

    def _open_ahead(self, req: ClientRequest, timeout: aiohttp.ClientTimeout) -> None:
        key = req.connection_key
        if key not in self._opening and not self.closed:
            self._opening[key] = self._loop.create_task(self._open(req, timeout))

    async def _open(self, req: ClientRequest, limits: aiohttp.ClientTimeout) -> None:
        key = req.connection_key
        try:
            # After the request that asked for it has gone out (its body is written by a
            # task queued after this one): a timer, so the loop's ready work runs first.
            await asyncio.sleep(AHEAD_AFTER_S)
            proto = await super()._create_connection(req, [], limits)
        except (aiohttp.ClientError, OSError):
            return  # the next request connects itself and reports what failed
        finally:
            del self._opening[key]
        if self.closed:
            proto.close()
            return
        old = self._spares.get(key)
        if old is not None:
            old[0].close()
        self._spares[key] = (proto, self._loop.time())
        self._loop.call_later(SPARE_MAX_AGE_S, self._expire, key, proto)

    def _expire(self, key: ConnectionKey, proto: ResponseHandler) -> None:
        spare = self._spares.get(key)
        if spare is not None and spare[0] is proto:
            del self._spares[key]
            proto.close()

    def _close(self, *, abort_ssl: bool = False) -> list[Awaitable[object]]:
        waiters = super()._close(abort_ssl=abort_ssl)
        for task in self._opening.values():
            task.cancel()
            waiters.append(task)
        for proto, _ in self._spares.values():
            proto.close()
        self._spares.clear()
        return waiters


@dataclass(frozen=True)
class Upstreams:
    """The proxy's client sessions to the node's engines, one per connection habit."""

    pooled: aiohttp.ClientSession
    """Keep-alive, no limit on connections (never fewer than a load's streams)."""
    fresh: aiohttp.ClientSession
    """A new connection per request, for engines that close theirs after every streamed
    answer (llama-server): a pooled one would be dead on reuse.  The next one is opened
    ahead (``AheadConnector``)."""

    def for_kind(self, kind: str) -> aiohttp.ClientSession:
        return self.fresh if get_spec(kind).closes_after_stream else self.pooled


UPSTREAMS = web.AppKey("proxy_upstreams", Upstreams)


def _upstream(request: web.Request) -> tuple[URL, dict[str, str], aiohttp.ClientSession]:
    """The deployment's own engine URL with the request's tail and query (the host and
    port come from the agent's record, never from the request), the headers to send and
    the session that suits the engine."""
    dep = request.app[MANAGER].get(request.match_info["id"])  # unknown id: 404
    if dep.url is None:
        raise ManagerError(409, f"engine {dep.id} has no address yet (state {dep.state})")
    url = URL(dep.url).with_path("/" + request.match_info["tail"]).with_query(request.query)
    headers = {
        k: v
        for k, v in request.headers.items()
        if k.lower() not in HOP_BY_HOP and k.lower() != "authorization"
    }
    api_key = dep.config.get("api_key")
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    return url, headers, request.app[UPSTREAMS].for_kind(dep.kind)


WHOLE_BODY_BYTES = 1 << 20
"""A request body up to this size (every chat or completion request) is read whole and sent
upstream in one write with its length; a larger or unsized one streams through chunked."""


async def _body(request: web.Request) -> bytes | AsyncIterator[bytes] | None:
    if not request.body_exists:
        return None
    length = request.content_length
    if length is not None and length <= WHOLE_BODY_BYTES:
        return await request.read()
    return _streamed(request)


async def _streamed(request: web.Request) -> AsyncIterator[bytes]:
    async for chunk in request.content.iter_any():
        yield chunk


class _Relayed(web.StreamResponse):
    """An engine's answer on its way out: the head waits for the first body bytes (sent
    by ``_relay`` at once where none came with it), so both leave in one send."""

    _send_headers_immediately = False


async def _relay(
    request: web.Request, upstream: aiohttp.ClientResponse, response: _Relayed
) -> None:
    """The engine's body to the client as it arrives; each write waits while the client's
    buffer is full.  The bytes that arrive with the engine's end go out with the chunked
    body's end."""
    body = upstream.content
    writer = await response.prepare(request)
    chunk = body.read_nowait()  # what came with the engine's head rides with ours
    if not chunk and not body.at_eof() and writer is not None:
        writer.send_headers()  # nothing yet: the client gets the status now
    while not body.at_eof():
        if chunk:
            await response.write(chunk)
        chunk = await body.readany()
    await response.write_eof(chunk)


async def proxy(request: web.Request) -> web.StreamResponse:
    url, headers, session = _upstream(request)
    dep_id = request.match_info["id"]
    try:
        upstream = await session.request(
            request.method,
            url,
            headers=headers,
            data=await _body(request),
            allow_redirects=False,
        )
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise ManagerError(
            502, f"engine {dep_id} at {url.origin()} did not answer: {exc or type(exc).__name__}"
        ) from None
    try:
        response = _Relayed(
            status=upstream.status,
            reason=upstream.reason,
            headers={k: v for k, v in upstream.headers.items() if k.lower() not in HOP_BY_HOP},
        )
        try:
            await _relay(request, upstream, response)
        except (aiohttp.ClientError, TimeoutError) as exc:
            # The status is sent: cut the client's connection so the stream ends in an
            # error there too, not in a clean (and silently short) end.
            log.warning("engine %s stopped mid-answer: %s", dep_id, exc)
            if request.transport is not None:
                request.transport.close()
        return response
    except ConnectionResetError:
        log.info("the client of engine %s went away: the engine's request is closed", dep_id)
        return response
    finally:
        # close(), not release(): an unfinished answer must drop the connection so the
        # engine sees the request cancelled (llama-server frees its slot).
        if not upstream.content.at_eof():
            upstream.close()
        upstream.release()


def _session(connector: aiohttp.TCPConnector) -> aiohttp.ClientSession:
    return aiohttp.ClientSession(
        connector=connector,
        timeout=aiohttp.ClientTimeout(total=None, sock_connect=CONNECT_TIMEOUT_S),
        auto_decompress=False,  # bytes pass through as the engine encoded them
    )


async def _proxy_sessions(app: web.Application) -> AsyncIterator[None]:
    upstreams = Upstreams(
        pooled=_session(aiohttp.TCPConnector(limit=0, keepalive_timeout=POOL_IDLE_S)),
        fresh=_session(AheadConnector()),
    )
    app[UPSTREAMS] = upstreams
    try:
        yield
    finally:
        await upstreams.pooled.close()
        await upstreams.fresh.close()


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
    app.cleanup_ctx.append(_proxy_sessions)
    for method in ("GET", "POST"):
        app.router.add_route(method, "/v1/engines/{id}/proxy/{tail:.*}", proxy)
