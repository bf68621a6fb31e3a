"""Start the known-schedule server (a real HTTP server in its own process)."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

SERVER = Path(__file__).with_name("sched_server.py")


class SchedServer:
    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(SERVER), "--port", "0", *args],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line.startswith("PORT "):
            self.stop()
            raise RuntimeError(f"schedule server did not start: {line!r}")
        self.port = int(line.split()[1])
        self.url = f"http://127.0.0.1:{self.port}"

    def truth(self) -> dict[str, Any]:
        with urllib.request.urlopen(self.url + "/_truth", timeout=10) as resp:
            data: dict[str, Any] = json.load(resp)
        return data

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


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
