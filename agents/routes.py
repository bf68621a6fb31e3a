"""HTTP and WebSocket handlers: thin, each one a call into the sampler or the manager."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from functools import partial
from typing import Any

from aiohttp import WSCloseCode, web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from agents.catalog_adapter import UnknownEngine
from agents.keys import AUDIT, MANAGER, NODE_INFO, REGISTRY, SAMPLER, SOCKETS
from agents.manager import ManagerError
from agents.protocol import dumps, frame_to_dict, to_dict
from agents.proxy import add_proxy_routes
from agents.security import PolicyError

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
json_response = partial(web.json_response, dumps=dumps)


async def stream_lines(
    request: web.Request, first: bytes, lines: AsyncGenerator[bytes, None]
) -> web.StreamResponse:
    """``first`` and then ``lines`` as NDJSON, as they come; a follower that goes away
    ends only its stream (what it follows goes on, and it can come back for the rest)."""
    response = web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
    await response.prepare(request)
    try:
        await response.write(first)
        async for line in lines:
            await response.write(line)
        await response.write_eof()
    except ConnectionResetError:
        pass
    finally:
        await lines.aclose()
    return response


"""Every answer in standard JSON (see agents.protocol.dumps)."""
AUDIT_DETAILS = web.RequestKey("audit_details", dict[str, Any])
"""What a control handler learnt for the audit record (the deployment it started...)."""


def error_answer(exc: Exception) -> tuple[int, str] | None:
    """The status and message a refusal or failure answers with; None for a bug."""
    if isinstance(exc, PolicyError):
        return 403, str(exc)
    if isinstance(exc, ManagerError):
        return exc.status, str(exc)
    if isinstance(exc, UnknownEngine):
        return 400, str(exc)
    if isinstance(exc, (ValueError, TypeError, KeyError)):
        return 400, f"bad request: {exc}"
    return None


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Refusals and failures answer JSON ``{"error": ...}`` in the agent's own words."""
    try:
        return await handler(request)
    except Exception as exc:
        answer = error_answer(exc)
        if answer is None:
            raise
        return json_response({"error": answer[1]}, status=answer[0])


def _since(request: web.Request) -> int | None:
    raw = request.query.get("since_seq")
    if raw is None or raw == "":
        return None
    try:
        return int(raw)
    except ValueError:
        raise ManagerError(400, f"since_seq must be an integer, not {raw!r}") from None


async def healthz(request: web.Request) -> web.Response:
    return json_response({"ok": True})


async def node(request: web.Request) -> web.Response:
    return json_response(to_dict(request.app[NODE_INFO]))


async def telemetry(request: web.Request) -> web.Response:
    frame = request.app[SAMPLER].latest
    if frame is None:
        frame = await request.app[SAMPLER].sample_once()
    return json_response(frame_to_dict(frame))


async def _stream_ws(request: web.Request, items: AsyncIterator[Any]) -> web.WebSocketResponse:
    ws = web.WebSocketResponse(heartbeat=20)
    await ws.prepare(request)
    sockets = request.app[SOCKETS]
    sockets.add(ws)

    async def pump() -> None:
        async for item in items:
            await ws.send_str(dumps(to_dict(item)))

    sender = asyncio.get_running_loop().create_task(pump())
    try:
        # Reading is how a close from the client (or the agent's shutdown) is noticed
        # while no item is due; the sender alone would wait on the next one.
        async for _ in ws:
            pass
    finally:
        sender.cancel()
        with contextlib.suppress(asyncio.CancelledError, ConnectionResetError, RuntimeError):
            await sender
        await items.aclose()  # type: ignore[attr-defined]
        sockets.discard(ws)
        await ws.close()
    return ws


async def close_sockets(app: web.Application) -> None:
    """On shutdown: close open streams so the server need not wait for them."""
    sockets: set[web.WebSocketResponse] = app[SOCKETS]
    for ws in list(sockets):
        await ws.close(code=WSCloseCode.GOING_AWAY, message=b"agent shutting down")


async def telemetry_stream(request: web.Request) -> web.WebSocketResponse:
    sampler = request.app[SAMPLER]
    boot = request.query.get("boot_id")
    return await _stream_ws(request, sampler.subscribe(_since(request), boot))


async def engines(request: web.Request) -> web.Response:
    manager = request.app[MANAGER]
    deps = list(manager.deployments.values())
    services = await manager.services()  # a manager node's Swarm services
    return json_response(
        {"engines": [to_dict(d.info()) for d in deps], "services": [to_dict(s) for s in services]}
    )


async def engine(request: web.Request) -> web.Response:
    dep = request.app[MANAGER].lookup(request.match_info["id"])  # a Swarm service too
    return json_response(to_dict(dep.info()))


_TYPE_NAMES = {
    str: "a string",
    dict: "an object",
    list: "a list",
    bool: "true or false",
    float: "a number with a decimal point",
}
START_FIELDS: dict[str, type] = {
    "kind": str,
    "config": dict,
    "gpus": list,
    "options": dict,
    "runtime": str,
    "wait": bool,
    "health_timeout_s": object,  # seconds, bounds checked by the manager
}
STOP_FIELDS: dict[str, type] = {"remove_volumes": list}
SCALE_FIELDS: dict[str, type] = {"replicas": int}
SWAP_FIELDS: dict[str, type] = {
    "config": dict,
    "kind": str,
    "options": dict,
    "health_timeout_s": object,  # as START_FIELDS
}


async def read_body(request: web.Request, fields: dict[str, type]) -> dict[str, Any]:
    """The JSON object of a control request; any field it does not know, or of the wrong
    type, is refused (400) before anything happens: nothing is silently dropped."""
    try:
        data = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ManagerError(400, f"the body is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ManagerError(400, "the body must be a JSON object")
    if unknown := sorted(set(data) - set(fields)):
        raise ManagerError(
            400,
            f"unknown field(s) {', '.join(unknown)}: nothing was done "
            f"(known fields: {', '.join(fields)})",
        )
    for name, kind in fields.items():
        value = data.get(name)
        if value is not None and not isinstance(value, kind):
            raise ManagerError(
                400, f"{name} must be {_TYPE_NAMES[kind]}, not {type(value).__name__}"
            )
    gpus = data.get("gpus")
    if gpus is not None and not all(type(g) is int and g >= 0 for g in gpus):
        raise ManagerError(400, "gpus must be a list of GPU indices (non-negative integers)")
    return data


def audited(action: str) -> Callable[[Handler], Handler]:
    """Record every control action, refused ones too, with its outcome as the caller saw
    it (the status answered) and the deployment it concerned."""

    def wrap(fn: Handler) -> Handler:
        async def handler(request: web.Request) -> web.StreamResponse:
            audit = request.app[AUDIT]
            try:
                response = await fn(request)
            except Exception as exc:
                status, reason = error_answer(exc) or (500, repr(exc))
                audit.record(
                    action,
                    request.remote,
                    "refused" if isinstance(exc, PolicyError) else "failed",
                    engine=request.match_info.get("id"),
                    status=status,
                    reason=reason,
                )
                raise
            details = {"engine": request.match_info.get("id"), **request.get(AUDIT_DETAILS, {})}
            outcome = "ok" if response.status < 400 else "failed"
            audit.record(action, request.remote, outcome, status=response.status, **details)
            return response

        return handler

    return wrap


@audited("start")
async def start(request: web.Request) -> web.StreamResponse:
    body = await read_body(request, START_FIELDS)
    kind = body.get("kind")
    if kind is None:
        raise ManagerError(400, "a start request needs 'kind' (e.g. \"llamacpp\")")
    dep = await request.app[MANAGER].start(
        kind,
        body.get("config") or {},
        body.get("gpus"),
        options=body.get("options") or {},
        runtime=body.get("runtime"),
        wait=body.get("wait", True),
        health_timeout_s=body.get("health_timeout_s"),
    )
    request[AUDIT_DETAILS] = {"engine": dep.id}
    if dep.state in ("ready", "starting", "loading", "deployed"):  # deployed: on Swarm
        return json_response(to_dict(dep.info()), status=201)
    # Kept in the engine list (state crashed, with the reason) until stopped.
    error = f"{dep.kind} {dep.id} did not start: {dep.message}"
    request[AUDIT_DETAILS]["reason"] = error
    return json_response({"error": error, "engine": to_dict(dep.info())}, status=502)


@audited("stop")
async def stop(request: web.Request) -> web.StreamResponse:
    """A plain stop keeps the engine's volumes; ``{"remove_volumes": [names]}`` removes
    those it names too (each must be one the deployment lists)."""
    body = await read_body(request, STOP_FIELDS) if request.can_read_body else {}
    names = body.get("remove_volumes") or []
    if not all(isinstance(n, str) and n for n in names):
        raise ManagerError(400, "remove_volumes must be a list of volume names")
    request[AUDIT_DETAILS] = {"remove_volumes": names} if names else {}
    dep = await request.app[MANAGER].stop(request.match_info["id"], remove_volumes=names)
    return json_response(to_dict(dep.info()))


@audited("swap")
async def swap(request: web.Request) -> web.StreamResponse:
    body = await read_body(request, SWAP_FIELDS)
    dep = await request.app[MANAGER].swap(
        request.match_info["id"],
        body.get("config") or {},
        kind=body.get("kind"),
        options=body.get("options"),
        health_timeout_s=body.get("health_timeout_s"),
    )
    return json_response(to_dict(dep.info()))


@audited("scale")
async def scale(request: web.Request) -> web.StreamResponse:
    """How many replicas a Swarm service runs: ``{"replicas": N}`` (0 keeps the service)."""
    body = await read_body(request, SCALE_FIELDS)
    if "replicas" not in body:
        raise ManagerError(400, 'a scale request needs "replicas" (a whole number)')
    dep = await request.app[MANAGER].scale(request.match_info["id"], body["replicas"])
    return json_response(to_dict(dep.info()))


async def logs(request: web.Request) -> web.StreamResponse:
    manager = request.app[MANAGER]
    dep_id = request.match_info["id"]
    manager.lookup(dep_id)  # 404 before the stream starts
    tail = max(0, int(request.query.get("tail", "100")))
    follow = request.query.get("follow", "0").lower() in ("1", "true", "yes")
    response = web.StreamResponse(headers={"Content-Type": "text/plain; charset=utf-8"})
    await response.prepare(request)
    try:
        async for line in manager.logs(dep_id, tail, follow):
            await response.write((line.rstrip("\n") + "\n").encode())
        await response.write_eof()
    except ConnectionResetError:
        pass  # the reader went away (a closed "follow")
    return response


async def events(request: web.Request) -> web.Response:
    since = _since(request)
    items = request.app[MANAGER].events.backlog(0 if since is None else since)
    return json_response({"events": [to_dict(e) for e in items]})


async def events_stream(request: web.Request) -> web.WebSocketResponse:
    boot = request.query.get("boot_id")
    return await _stream_ws(request, request.app[MANAGER].subscribe_events(_since(request), boot))


async def metrics(request: web.Request) -> web.Response:
    body = generate_latest(request.app[REGISTRY])
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


def add_routes(app: web.Application) -> None:
    app[SOCKETS] = set()
    app.on_shutdown.append(close_sockets)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/v1/node", node)
    app.router.add_get("/v1/telemetry", telemetry)
    app.router.add_get("/v1/telemetry/stream", telemetry_stream)
    app.router.add_get("/v1/engines", engines)
    app.router.add_post("/v1/engines", start)
    app.router.add_get("/v1/engines/{id}", engine)
    app.router.add_post("/v1/engines/{id}/stop", stop)
    app.router.add_post("/v1/engines/{id}/swap", swap)
    app.router.add_post("/v1/engines/{id}/scale", scale)
    app.router.add_get("/v1/engines/{id}/logs", logs)
    add_proxy_routes(app)
    app.router.add_get("/v1/events", events)
    app.router.add_get("/v1/events/stream", events_stream)
    app.router.add_get("/metrics", metrics)
