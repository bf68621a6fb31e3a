"""A misbehaving engine for the fault tests, run by the agent's process runtime as the
native llamacpp (or vLLM, or SGLang) binary.  It takes the engine's flags, answers
``/health``, and serves ``/metrics`` and ``/slots`` from the files ``metrics`` and
``slots`` next to its ``-m`` / ``--model`` / ``--model-path`` "model" (read per request,
so a test changes what it serves by rewriting them).  With a file ``loading`` there it
never finishes loading: /health answers llama-server's 503 "Loading model" and the log's
last line is the file's text.  With a file ``health-503`` /health answers SGLang's bare
503 (its answer while starting, and once up when its own check timed out).  A file
``version`` is served as ``{"version": ...}`` at vLLM's /version and SGLang's
/get_server_info.  ``/v1/chat/completions`` streams a short answer and notes the client's
port; ``/peers`` lists those ports, one per request (a reused connection repeats one), and
``/opened`` when each client port connected (``time.monotonic``, the machine's clock) and
which ports carried any request.  ``/blob?bytes=N&framing=chunked|length|close`` answers N
bytes of a known pattern (``blob_bytes``) framed so (``close``: no length, no chunks, the
end is the connection's close), written 64 KiB at a time, each write waiting for the
client; ``/written`` says how many of them have been handed to the socket so far."""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from aiohttp import web, web_protocol, web_server

BLOB_PIECE = 64 * 1024


def blob_bytes(n: int) -> bytes:
    """The ``/blob`` body: every byte says where it is, so a lost or repeated piece shows."""
    return (bytes(range(251)) * (n // 251 + 1))[:n]


class _Unframed(web.StreamResponse):
    """An answer whose end is the connection's close (HTTP/1.0 style)."""

    _length_check = False


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
OPENED: dict[int, float] = {}
"""Client port -> when its connection was accepted."""
SERVED: set[int] = set()
"""Client ports that carried a request (any route)."""


class _NotingHandler(web_protocol.RequestHandler):
    def connection_made(self, transport: object) -> None:
        peer = getattr(transport, "get_extra_info", lambda _: None)("peername")
        if peer:
            OPENED[peer[1]] = time.monotonic()
        super().connection_made(transport)  # type: ignore[arg-type]


web_server.RequestHandler = _NotingHandler  # type: ignore[attr-defined]  # what web.Server builds


def main() -> None:
    parser = argparse.ArgumentParser()
    # llama.cpp, vLLM, SGLang
    parser.add_argument("-m", "--model", "--model-path", dest="model", required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    args, _ = parser.parse_known_args()  # -np, -c, --metrics... mean nothing here
    pages = Path(args.model).parent
    loading = pages / "loading"
    if loading.is_file():
        print(loading.read_text().strip(), flush=True)

    async def health(request: web.Request) -> web.Response:
        if (pages / "health-503").is_file():
            return web.Response(status=503)
        if loading.is_file():
            error = {"code": 503, "message": "Loading model", "type": "unavailable_error"}
            return web.json_response({"error": error}, status=503)
        return web.json_response({"status": "ok"})

    async def version(request: web.Request) -> web.Response:
        path = pages / "version"
        if not path.is_file():
            return web.json_response({"detail": "Not Found"}, status=404)
        return web.json_response({"version": path.read_text().strip()})

    async def page(request: web.Request) -> web.Response:
        path = pages / request.path.strip("/")
        if not path.is_file():
            return web.json_response({"error": "not served"}, status=501)
        return web.Response(body=path.read_bytes(), content_type="text/plain")

    peers: list[int] = []

    async def chat(request: web.Request) -> web.StreamResponse:
        await request.read()
        peer = request.transport.get_extra_info("peername") if request.transport else None
        peers.append(peer[1] if peer else 0)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for text in ("a", "b"):
            delta = json.dumps({"choices": [{"index": 0, "delta": {"content": text}}]})
            await resp.write(f"data: {delta}\n\n".encode())
        await resp.write_eof(b"data: [DONE]\n\n")  # the connection stays the client's
        return resp

    written = [0]

    async def blob(request: web.Request) -> web.StreamResponse:
        size, framing = int(request.query["bytes"]), request.query["framing"]
        body = blob_bytes(size)
        written[0] = 0
        resp = _Unframed() if framing == "close" else web.StreamResponse()
        if framing == "length":
            resp.content_length = size
        if framing == "close":
            resp.force_close()
        await resp.prepare(request)
        for at in range(0, size, BLOB_PIECE):
            await resp.write(body[at : at + BLOB_PIECE])  # waits while the client's full
            written[0] = at + len(body[at : at + BLOB_PIECE])
        await resp.write_eof()
        return resp

    async def written_so_far(request: web.Request) -> web.Response:
        return web.json_response(written[0])

    async def peer_list(request: web.Request) -> web.Response:
        return web.json_response(peers)

    async def opened(request: web.Request) -> web.Response:
        return web.json_response({"opened": OPENED, "served": sorted(SERVED)})

    @web.middleware
    async def note_served(request: web.Request, handler: Handler) -> web.StreamResponse:
        peer = request.transport.get_extra_info("peername") if request.transport else None
        if peer:
            SERVED.add(peer[1])
        return await handler(request)

    app = web.Application(middlewares=[note_served])
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_get("/peers", peer_list)
    app.router.add_get("/blob", blob)
    app.router.add_get("/written", written_so_far)
    app.router.add_get("/opened", opened)
    app.router.add_get("/health", health)
    app.router.add_get("/metrics", page)
    app.router.add_get("/slots", page)
    app.router.add_get("/version", version)
    app.router.add_get("/get_server_info", version)
    web.run_app(app, host=args.host, port=args.port, print=None)


if __name__ == "__main__":
    main()
