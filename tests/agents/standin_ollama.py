"""A stand-in `ollama serve`, run by the agent's process runtime as the native Ollama
binary.  It speaks the shape of Ollama's own API (ollama/ollama docs/api.md at fb30760,
the provenance of /work/shared/fixtures/engines/ollama_api_samples.txt; errors as
server/routes.go streamResponse writes them):

* ``GET /`` answers "Ollama is running" from the start, model or not;
* ``POST /api/show`` answers 200 for a model in its store, else 404 ``{"error":
  "model 'x' not found"}``;
* ``POST /api/pull`` streams NDJSON progress: "pulling manifest", then the layer's
  ``{"status": "pulling <digest>", "digest", "total", "completed"}`` at 25 %, then (once
  the test posts to ``/standin/resume``) at 100 %, "verifying sha256 digest",
  "writing manifest", "removing any unused layers", "success"; the model is then in
  the store.  With a file ``pull-error`` in the store the stream ends after "pulling
  manifest" with ``{"error": <its text>}``, as the real server's does mid-stream.

The store is the directory ``$OLLAMA_MODELS`` (a model is a file named after it)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from pathlib import Path

from aiohttp import web

DIGEST = "sha256-6a0746a1ec1aef3e7ec53868f220ff6e389f6f8ef87a01d77c96807de94ca2aa"
LAYER_BYTES = 2_142_590_208
RESUME_WAIT_S = 60.0


def main() -> None:
    host, _, port = os.environ["OLLAMA_HOST"].rpartition(":")
    store = Path(os.environ["OLLAMA_MODELS"])

    def have(name: str) -> Path:
        return store / name.replace("/", "_")

    resumed = asyncio.Event()

    async def resume(request: web.Request) -> web.Response:
        resumed.set()
        return web.Response(text="resumed")

    async def root(request: web.Request) -> web.Response:
        return web.Response(text="Ollama is running")

    async def show(request: web.Request) -> web.Response:
        name = str((await request.json())["model"])
        if not have(name).is_file():
            return web.json_response({"error": f"model '{name}' not found"}, status=404)
        details = {"format": "gguf", "family": "llama", "parameter_size": "1.1B"}
        return web.json_response({"details": details, "model_info": {}})

    async def pull(request: web.Request) -> web.StreamResponse:
        name = str((await request.json())["model"])
        resp = web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
        await resp.prepare(request)

        async def line(obj: object) -> None:
            await resp.write(json.dumps(obj).encode() + b"\n")

        await line({"status": "pulling manifest"})
        failure = store / "pull-error"
        if failure.is_file():
            await line({"error": failure.read_text().strip()})
            return resp
        layer = {"status": f"pulling {DIGEST[7:19]}", "digest": DIGEST, "total": LAYER_BYTES}
        await line({**layer, "completed": LAYER_BYTES // 4})
        with contextlib.suppress(TimeoutError):  # a test that never resumes still ends
            await asyncio.wait_for(resumed.wait(), RESUME_WAIT_S)
        await line({**layer, "completed": LAYER_BYTES})
        for status in ("verifying sha256 digest", "writing manifest", "removing any unused layers"):
            await line({"status": status})
        have(name).write_text("pulled")
        await line({"status": "success"})
        return resp

    app = web.Application()
    app.router.add_get("/", root)
    app.router.add_post("/api/show", show)
    app.router.add_post("/api/pull", pull)
    app.router.add_post("/standin/resume", resume)
    web.run_app(app, host=host, port=int(port), print=None)


if __name__ == "__main__":
    main()
