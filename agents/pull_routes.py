"""``POST /v1/models-inventory/pull``: fetch a model into the node's cache (a Hugging
Face repository's files for an engine, or an Ollama tag); ``GET
/v1/models-inventory/pulls[/{id}]``: the pulls, one followed as NDJSON to its end;
``POST .../pulls/{id}/cancel``."""

from __future__ import annotations

from collections.abc import AsyncIterator

from aiohttp import web

from agents.catalog_adapter import get_spec
from agents.keys import CONFIG, MANAGER
from agents.manager import ManagerError
from agents.protocol import to_dict
from agents.pull_jobs import Pulls
from agents.routes import AUDIT_DETAILS, audited, json_response, read_body, stream_lines
from engines.hub_files import check_revision, parse_ref

PULLS = web.AppKey("pulls", Pulls)
PULL_FIELDS: dict[str, type] = {
    "model": str,
    "revision": str,
    "engine": str,
    "quant": str,
    "token": str,
}


@audited("model-pull")
async def start_pull(request: web.Request) -> web.StreamResponse:
    """``model``: ``org/name`` (``revision``, default main) fetched with only the files
    ``engine`` loads (``quant`` picks a GGUF), or with ``engine: ollama`` an Ollama tag;
    ``token``: the operator's hub token, kept by the pull's worker only."""
    body = await read_body(request, PULL_FIELDS)
    model, engine = body.get("model"), body.get("engine")
    if not model:
        raise ManagerError(400, "a pull request needs 'model' (ORG/NAME, or an Ollama tag)")
    # never the token: the audit log keeps what was asked, not the credentials
    request[AUDIT_DETAILS] = {"model": model, "revision": body.get("revision"), "engine": engine}
    pulls = request.app[PULLS]
    if engine == "ollama":
        info = await pulls.start_ollama(model)
    else:
        try:
            repo, revision = parse_ref(model)
            revision = check_revision(body["revision"]) if body.get("revision") else revision
        except ValueError as exc:
            raise ManagerError(400, str(exc)) from None
        weights = get_spec(engine).weights_format if engine else None  # unknown: a 400
        if weights is None:
            weights = "gguf" if body.get("quant") else "safetensors"
        info = await pulls.start_hf(repo, revision, weights, body.get("quant"), body.get("token"))
    request[AUDIT_DETAILS]["pull"] = info.id
    return json_response(to_dict(info), status=202)


async def list_pulls(request: web.Request) -> web.Response:
    jobs = request.app[PULLS].jobs.values()
    return json_response({"pulls": [to_dict(j.info) for j in jobs]})


async def follow_pull(request: web.Request) -> web.StreamResponse:
    lines = request.app[PULLS].follow(request.match_info["id"])
    first = await anext(lines)  # an unknown pull is a 404 before the stream starts
    # a follower that goes away leaves the pull going until it is cancelled
    return await stream_lines(request, first, lines)


@audited("model-pull-cancel")
async def cancel_pull(request: web.Request) -> web.StreamResponse:
    pull_id = request.match_info["id"]
    request[AUDIT_DETAILS] = {"pull": pull_id}
    return json_response(to_dict(await request.app[PULLS].cancel(pull_id)))


async def _pulls(app: web.Application) -> AsyncIterator[None]:
    app[PULLS] = Pulls(app[CONFIG], app[MANAGER])
    try:
        yield
    finally:
        await app[PULLS].close()


def add_pull_routes(app: web.Application) -> None:
    app.cleanup_ctx.append(_pulls)
    app.router.add_post("/v1/models-inventory/pull", start_pull)
    app.router.add_get("/v1/models-inventory/pulls", list_pulls)
    app.router.add_get("/v1/models-inventory/pulls/{id}", follow_pull)
    app.router.add_post("/v1/models-inventory/pulls/{id}/cancel", cancel_pull)
