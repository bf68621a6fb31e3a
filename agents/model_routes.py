"""``GET /v1/models-inventory``: the models this node holds; ``POST
/v1/models-inventory/remove``: one of them removed by name, audited, refused while an
engine this agent manages runs it."""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web

from agents.keys import CONFIG, MANAGER
from agents.manager import ManagerError
from agents.model_store import model_matches, remove_model, scan_inventory
from agents.protocol import to_dict
from agents.routes import AUDIT_DETAILS, audited, json_response, read_body

REMOVE_FIELDS: dict[str, type] = {"name": str}


async def inventory(request: web.Request) -> web.Response:
    found = await asyncio.to_thread(scan_inventory, request.app[CONFIG])
    return json_response(to_dict(found))


@audited("model-remove")
async def remove(request: web.Request) -> web.StreamResponse:
    """Remove the one model named ``name`` (its name in the inventory, or its path there),
    unless an engine this agent manages runs it."""
    body = await read_body(request, REMOVE_FIELDS)
    name = body.get("name")
    if not name:
        raise ManagerError(400, "a remove request needs 'name' (a model as listed)")
    config = request.app[CONFIG]
    found = await asyncio.to_thread(scan_inventory, config)
    matches = [m for m in found.models if name in (m.name, m.path)]
    request[AUDIT_DETAILS] = {"model": name}
    if not matches:
        raise ManagerError(404, f"no model {name!r} on node {config.node_name}: nothing removed")
    if len(matches) > 1:
        where = ", ".join(m.path for m in matches)
        raise ManagerError(
            409, f"{len(matches)} models are named {name!r} ({where}): name one by its path"
        )
    model = matches[0]
    for dep in request.app[MANAGER].deployments.values():
        if model_matches(model, str(dep.config.get("model") or ""), dep.options.get("model_dir")):
            raise ManagerError(
                409,
                f"model {model.name} is in use by {dep.kind} engine {dep.id} ({dep.state}): "
                "stop it first; nothing removed",
            )
    await asyncio.to_thread(remove_model, model)
    details: dict[str, Any] = {"path": model.path, "size_bytes": model.size_bytes}
    request[AUDIT_DETAILS].update(details)
    return json_response({"removed": to_dict(model)})


def add_model_routes(app: web.Application) -> None:
    app.router.add_get("/v1/models-inventory", inventory)
    app.router.add_post("/v1/models-inventory/remove", remove)
