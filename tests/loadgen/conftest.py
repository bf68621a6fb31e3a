"""Start the known-schedule server (a real HTTP server in its own process)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from tests.loadgen.sched_server import SchedServer


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
