"""Start the known-schedule server (a real HTTP server in its own process), and
run ``infer-top bench`` as the real command in a process of its own."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.loadgen.sched_server import SchedServer

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
