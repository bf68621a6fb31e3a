"""Start the known-schedule server (a real HTTP server in its own process), serve
stand-in engines from the test's own loop, and run ``infer-top bench`` as the real
command in a process of its own."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import pytest
from aiohttp import web

from sim import RunningSim, start_sim
from tests.conftest import Rig
from tests.loadgen.sched_server import SchedServer
from tests.ports import free_port

ROOT = Path(__file__).parents[2]


def infer_top_argv(*argv: str) -> list[str]:
    """``infer-top ARGV`` from this checkout (run it with ``cwd=ROOT``)."""
    return [sys.executable, "-m", "tui.cli", *argv]


async def bench(*argv: str, timeout_s: float = 120.0) -> tuple[int, str, str]:
    """Run ``infer-top bench ARGV`` without blocking this loop (it serves the engine)."""
    proc = await asyncio.create_subprocess_exec(
        *infer_top_argv("bench", "--quiet", *argv),
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout_s)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


@pytest.fixture
def sched_server() -> Iterator[Callable[..., SchedServer]]:
    started: list[SchedServer] = []

    def start(*args: str) -> SchedServer:
        server = SchedServer(*args)
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
"""A stand-in engine's chat-completions handler (what a test makes it answer)."""


@pytest.fixture
async def serve() -> AsyncIterator[Callable[[Handler], Awaitable[str]]]:
    """Serve a stand-in engine's ``/v1/chat/completions`` on 127.0.0.1 (its ``/v1/models``
    lists model "m", as the bench's pre-flight asks); returns its URL."""
    runners: list[web.AppRunner] = []

    async def models(_: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "m", "object": "model"}]})

    async def start(handler: Handler) -> str:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", handler)
        app.router.add_get("/v1/models", models)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        runners.append(runner)
        return f"http://127.0.0.1:{runner.addresses[0][1]}"

    yield start
    for runner in runners:
        await runner.cleanup()


@pytest.fixture
async def vllm_sim() -> AsyncIterator[RunningSim]:
    """The simulator's vLLM profile (prefix caching on) on 127.0.0.1, ready."""
    sim = await start_sim("h100-llama2-7b-vllm", host="127.0.0.1", port=0, time_scale=0.05)
    try:
        await sim.wait_ready()
        yield sim
    finally:
        await sim.stop()


@pytest.fixture
def llama_server(rig: Rig, tmp_path: Path) -> Iterator[str]:
    """The rig's llama-server as a process on 127.0.0.1; killed afterwards."""
    port = free_port()
    argv = [str(rig.llama_server_bin), "-m", str(rig.tiny_model), "--host", "127.0.0.1",
            "--port", str(port), "-np", "2", "-c", "4096", "-t", "1"]  # fmt: skip
    with (tmp_path / "llama-server.log").open("wb") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.kill()
        proc.wait(timeout=30)
