"""``/v1/engines/{id}/proxy/{tail}``: an engine's own API, reached through its agent.

Engines bind their node's loopback, so a client on another machine (the control plane's
load generator, an operator's curl, an OpenAI SDK) reaches one through the agent, with the
agent's bearer token (checked by the auth middleware like every other route). The proxy
forwards only to that deployment's own URL, never to a host the request names: it is not
an open proxy. The engine's API key, where the deployment has one, replaces the caller's
Authorization header. Bodies stream both ways chunk by chunk (SSE arrives as the engine
writes it); a write waits for the client to drain (back-pressure), and a client that goes
away closes the upstream connection, which is how engines notice a cancelled request.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

import aiohttp
from aiohttp import web
from aiohttp.web_log import AccessLogger
from aiohttp.web_request import BaseRequest
from yarl import URL

from agents.keys import MANAGER
from agents.manager import ManagerError

log = logging.getLogger(__name__)

PROXY_SESSION = web.AppKey("proxy_session", aiohttp.ClientSession)
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


def _upstream(request: web.Request) -> tuple[URL, dict[str, str]]:
    """The deployment's own engine URL with the request's tail and query (the host and
    port come from the agent's record, never from the request), and the headers to send."""
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
    return url, headers


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


async def proxy(request: web.Request) -> web.StreamResponse:
    url, headers = _upstream(request)
    session = request.app[PROXY_SESSION]
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
        response = web.StreamResponse(
            status=upstream.status,
            reason=upstream.reason,
            headers={k: v for k, v in upstream.headers.items() if k.lower() not in HOP_BY_HOP},
        )
        await response.prepare(request)
        try:
            async for chunk in upstream.content.iter_any():
                await response.write(chunk)  # waits while the client's buffer is full
        except (aiohttp.ClientError, TimeoutError) as exc:
            # The status is sent: cut the client's connection so the stream ends in an
            # error there too, not in a clean (and silently short) end.
            log.warning("engine %s stopped mid-answer: %s", dep_id, exc)
            if request.transport is not None:
                request.transport.close()
            return response
        await response.write_eof()
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


async def _proxy_session(app: web.Application) -> AsyncIterator[None]:
    session = aiohttp.ClientSession(
        # A fresh loopback connection per request (tens of microseconds): engines close
        # kept-alive connections on their own terms (llama-server after a streamed answer),
        # and a request body streamed into a stale one cannot be sent again.
        connector=aiohttp.TCPConnector(limit=0, force_close=True),
        timeout=aiohttp.ClientTimeout(total=None, sock_connect=CONNECT_TIMEOUT_S),
        auto_decompress=False,  # bytes pass through as the engine encoded them
    )
    app[PROXY_SESSION] = session
    try:
        yield
    finally:
        await session.close()


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
    app.cleanup_ctx.append(_proxy_session)
    for method in ("GET", "POST"):
        app.router.add_route(method, "/v1/engines/{id}/proxy/{tail:.*}", proxy)
