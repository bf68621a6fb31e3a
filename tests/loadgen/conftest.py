"""Start the known-schedule server (a real HTTP server in its own process), and
run ``infer-top bench`` as the real command in a process of its own."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.loadgen.sched_server import SchedServer

ROOT = Path(__file__).parents[2]


def infer_top_argv(*argv: str) -> list[str]:
    """``infer-top ARGV`` from this checkout (run it with ``cwd=ROOT``)."""
    return [sys.executable, "-m", "tui.cli", *argv]


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
