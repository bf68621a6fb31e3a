"""The simulated Ollama's model store: ``POST /api/show`` answers 200 for a model it
has (the profile's, and every one pulled since) and 404 ``{"error": "model 'x' not
found"}`` otherwise; ``POST /api/pull`` streams Ollama's own progress lines
(api.ProgressResponse: "pulling manifest", the layer's ``{"status": "pulling <digest>",
"digest", "total", "completed"}`` in steps, "verifying sha256 digest", "writing
manifest", "success"), paced by the simulator's time scale, and then has the model."""

from __future__ import annotations

import asyncio
import hashlib
import json

from aiohttp import web

from sim.server import SimServer

LAYER_BYTES = 4_920_753_328
"""An 8B Q4_K_M layer's size, as Ollama's library serves llama3.1:8b."""
PULL_STEPS = 8
STEP_S = 2.0
"""Virtual seconds per progress step (scaled by the simulator's time scale)."""


def add_pull_routes(router: web.UrlDispatcher, sim: SimServer) -> None:
    have = {sim.profile.model}

    async def model_of(request: web.Request) -> str:
        try:
            body = await request.json()
        except json.JSONDecodeError:
            raise web.HTTPBadRequest(text='{"error": "invalid JSON"}') from None
        name = body.get("model") if isinstance(body, dict) else None
        if not isinstance(name, str) or not name:
            raise web.HTTPBadRequest(text='{"error": "model is required"}')
        return name

    async def show(request: web.Request) -> web.Response:
        name = await model_of(request)
        if name not in have:
            return web.json_response({"error": f"model '{name}' not found"}, status=404)
        details = {"format": "gguf", "family": "llama", "quantization_level": "Q4_K_M"}
        return web.json_response({"details": details, "infer_top_simulated": True})

    async def pull(request: web.Request) -> web.StreamResponse:
        name = await model_of(request)
        resp = web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
        await resp.prepare(request)

        async def line(obj: object) -> None:
            await resp.write(json.dumps(obj).encode() + b"\n")

        await line({"status": "pulling manifest"})
        digest = "sha256-" + hashlib.sha256(name.encode()).hexdigest()
        layer = {"status": f"pulling {digest[7:19]}", "digest": digest, "total": LAYER_BYTES}
        for step in range(PULL_STEPS + 1):
            await line({**layer, "completed": LAYER_BYTES * step // PULL_STEPS})
            if step < PULL_STEPS:
                await asyncio.sleep(STEP_S * sim.time_scale)
        for status in ("verifying sha256 digest", "writing manifest", "success"):
            await line({"status": status})
        have.add(name)
        await resp.write_eof()
        return resp

    router.add_post("/api/show", show)
    router.add_post("/api/pull", pull)
