"""HTTP surface of a simulated engine: routes per dialect, loading behaviour, start/stop.

What the imitated engine does is read from its spec in ``engines.catalog``: its
routes (health, metrics, JSON metrics, slots), and health while "loading"
(``loading_status``): vLLM, TensorRT-LLM, TGI and LMDeploy open their port only
once the model is loaded, so connections are refused before; llama.cpp answers
503 ``Loading model`` on every route; SGLang answers 503; Ollama's ``/`` says
"Ollama is running" at once and generation requests wait for the model.  How
answers look (bodies, extra routes) follows the spec's ``dialect``.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from typing import Any

from aiohttp import web

from sim import dialects, introspect
from sim.faults import FaultConfig
from sim.labels import OWNED_BY, SIM_HEADER
from sim.ollama_pull import add_pull_routes
from sim.openai_api import BadRequest, error_body
from sim.profile import ProfileError, SimProfile, load_profile
from sim.scheduler import RequestTrace
from sim.server import SimServer
from sim.tokenize import tokenize_answer

_Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _loading_response(dialect: str) -> web.Response:
    if dialect == "llamacpp":
        body = {"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}}
        return web.json_response(body, status=503)
    return web.Response(status=503)  # SGLang: empty 503 until its warm-up request went through


def trace_json(trace: RequestTrace) -> dict[str, Any]:
    data = asdict(trace)
    data["outcome"] = str(trace.outcome)
    data["ttft_s"] = trace.ttft_s
    return data


def build_app(sim: SimServer) -> web.Application:
    """The imitated engine's routes; ProfileError when the simulator cannot imitate
    the dialect the profile's engine speaks."""
    p = sim.profile
    spec = p.spec
    dialect = spec.dialect
    if dialect not in dialects.IMITATED:
        raise ProfileError(
            f"profile {p.name!r}: {spec.display_name} speaks the {dialect!r} dialect; the "
            f"simulator imitates {', '.join(sorted(dialects.IMITATED))}"
        )

    def gated(handler: _Handler) -> _Handler:
        """While its model loads, an engine that listens early (llama.cpp, SGLang) answers
        every route with its loading response. Per route, not as a middleware: aiohttp
        caches each middleware chain with its handler and app for the life of the process,
        so every stopped simulator, metrics and traces, stayed in the agent's memory."""
        if spec.loading_status != 503:
            return handler

        async def gate(request: web.Request) -> web.StreamResponse:
            if not sim.loaded.is_set():
                return _loading_response(dialect)
            return await handler(request)

        return gate

    async def mark_simulated(request: web.Request, response: web.StreamResponse) -> None:
        response.headers[SIM_HEADER] = "1"

    app = web.Application()
    app.on_response_prepare.append(mark_simulated)

    def gen(api: str) -> _Handler:
        async def handler(request: web.Request) -> web.StreamResponse:
            return await sim.generate(request, api)

        return handler

    async def models(_: web.Request) -> web.Response:
        entry = {
            "id": p.model,
            "object": "model",
            "created": int(sim.started_epoch),
            "owned_by": OWNED_BY,
            "max_model_len": p.max_model_len,
            "infer_top_simulated": True,
            "profile": p.name,
        }
        return web.json_response({"object": "list", "data": [entry]})

    async def health(_: web.Request) -> web.Response:
        if dialect == "llamacpp":
            return web.json_response({"status": "ok"})
        return web.Response(status=200)

    async def prom(_: web.Request) -> web.Response:
        text = dialects.prometheus_text(p, sim.sched, sim.metrics)
        if text is None:
            raise web.HTTPNotFound(text="404 page not found")
        return web.Response(text=text, content_type="text/plain", charset="utf-8")

    async def trtllm_json(_: web.Request) -> web.Response:
        return web.json_response(introspect.trtllm_iterations(p, sim.metrics, sim.started_epoch))

    async def slots(_: web.Request) -> web.Response:
        return web.json_response(introspect.llamacpp_slots(p, sim.sched))

    async def ollama_root(_: web.Request) -> web.Response:
        return web.Response(text="Ollama is running")

    async def ollama_ps(_: web.Request) -> web.Response:
        return web.json_response(introspect.ollama_ps(p, sim.loaded.is_set()))

    async def ollama_tags(_: web.Request) -> web.Response:
        listing = introspect.ollama_ps(p, True)["models"]
        return web.json_response({"models": listing, "infer_top_simulated": True})

    async def version(_: web.Request) -> web.Response:
        return web.json_response({"version": p.engine_version, "infer_top_simulated": True})

    async def ground_truth(request: web.Request) -> web.Response:
        traces = [trace_json(t) for t in sim.ground_truth(clock="epoch")]
        lag = sim.max_lag_s
        if request.query.get("reset_lag") == "1":
            sim.max_lag_s = 0.0
        body = {"profile": p.name, "simulated": True, "time_scale": sim.time_scale,
                "max_lag_s": lag, "traces": traces}  # fmt: skip
        return web.json_response(body)

    async def tokenize(request: web.Request) -> web.Response:
        assert spec.tokenize is not None  # routed only where the engine has one
        try:
            answer = tokenize_answer(spec.tokenize, await request.read(), p)
        except BadRequest as exc:
            return web.json_response(error_body(str(exc), exc.status), status=exc.status)
        return web.json_response(answer)

    r = app.router
    r.add_get("/v1/models", gated(models))
    r.add_post("/v1/chat/completions", gated(gen("chat")))
    r.add_post("/v1/completions", gated(gen("completions")))
    r.add_get("/infer-top/ground-truth", gated(ground_truth))
    if dialect == "ollama":
        r.add_get(spec.health_path, gated(ollama_root))
        r.add_get("/api/ps", gated(ollama_ps))
        r.add_get("/api/tags", gated(ollama_tags))
        r.add_get("/api/version", gated(version))
        r.add_post("/api/chat", gated(gen("ollama_chat")))
        r.add_post("/api/generate", gated(gen("ollama_generate")))
        add_pull_routes(r, sim)
        return app
    r.add_get(spec.health_path, gated(health))
    r.add_get("/version", gated(version))
    if spec.tokenize is not None:  # Ollama counts with its /api/generate, routed above
        r.add_post(spec.tokenize.path, gated(tokenize))
    pages = {"prometheus": prom, "json": trtllm_json, "llamacpp_slots": slots}
    if spec.metrics_path is not None and spec.metrics_format is not None:
        r.add_get(spec.metrics_path, gated(pages[spec.metrics_format]))
    if spec.second_page_path is not None and spec.second_page_format is not None:
        r.add_get(spec.second_page_path, gated(pages[spec.second_page_format]))
    return app


@dataclass(slots=True)
class RunningSim:
    """A simulated engine serving on a real port."""

    server: SimServer
    host: str
    port: int
    _runner: web.AppRunner
    _sock: socket.socket
    _bind_task: asyncio.Task[None] | None = None

    @property
    def profile(self) -> SimProfile:
        return self.server.profile

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @property
    def max_lag_s(self) -> float:
        """How far delivery has trailed the schedule (ground truth holds while this is small)."""
        return self.server.max_lag_s

    @property
    def crashed(self) -> bool:
        return self.server.crashed

    def ground_truth(self, *, clock: str = "virtual") -> list[RequestTrace]:
        return self.server.ground_truth(clock=clock)

    async def wait_ready(self) -> None:
        """Returns once the model is "loaded" and the port accepts connections."""
        await self.server.loaded.wait()
        if self._bind_task is not None:
            await asyncio.shield(self._bind_task)

    async def stop(self) -> None:
        if self._bind_task is not None:
            self._bind_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._bind_task
        await self.server.close()
        await self._runner.cleanup()
        self._sock.close()


def _reserve(host: str, port: int) -> socket.socket:
    """Bind (not listen): the port is ours, yet connections are refused until listen()."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    sock.setblocking(False)
    return sock


async def start_sim(
    profile: SimProfile | str,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    seed: int = 0,
    time_scale: float | None = None,
    faults: FaultConfig | None = None,
) -> RunningSim:
    """Start a simulated engine in this event loop.

    Returns at once; engines that bind late (``loading_status`` None: vLLM,
    TensorRT-LLM...) refuse connections until ``wait_ready()`` would return.
    ProfileError when the simulator cannot imitate the profile's engine.
    """
    prof = load_profile(profile) if isinstance(profile, str) else profile
    sim = SimServer(prof, seed=seed, time_scale=time_scale, faults=faults)
    runner = web.AppRunner(build_app(sim), shutdown_timeout=1.0, handle_signals=False)
    await runner.setup()
    sock = _reserve(host, port)
    running = RunningSim(sim, host, sock.getsockname()[1], runner, sock)
    site = web.SockSite(runner, sock)

    def on_crash() -> None:
        asyncio.get_running_loop().create_task(site.stop())

    sim.on_crash = on_crash
    sim.start()
    if prof.spec.loading_status is None and sim.load_time_s > 0:

        async def bind_when_loaded() -> None:
            await sim.loaded.wait()
            await site.start()

        running._bind_task = asyncio.get_running_loop().create_task(bind_when_loaded())
    else:
        await site.start()
    return running
