"""A real terminal (tmux) for the TUI, driven by keys as a person would."""

from __future__ import annotations

import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import IN_CI
from tests.waiting import poll_until


class Tmux:
    def __init__(self, tmp: Path) -> None:
        self.socket = f"infer-top-test-{uuid.uuid4().hex[:8]}"
        self.tmp = tmp

    def run(self, *args: str) -> str:
        out = subprocess.run(
            ["tmux", "-L", self.socket, *args],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
        return out.stdout

    def start(self, command: str) -> None:
        self.run("new-session", "-d", "-s", "demo", "-x", "120", "-y", "40", command)

    def keys(self, *keys: str) -> None:
        self.run("send-keys", "-t", "demo", *keys)

    def screen(self) -> str:
        return self.run("capture-pane", "-p", "-t", "demo")

    def wait_for(self, *texts: str, timeout_s: float = 60.0) -> str:
        return poll_until(
            self.screen,
            f"{texts!r} on the screen",
            done=lambda screen: all(t in screen for t in texts),
            timeout_s=timeout_s,
            every_s=0.3,
        )

    def wait_gone(self, text: str, timeout_s: float = 30.0) -> None:
        poll_until(
            self.screen,
            f"{text!r} to go away",
            done=lambda screen: text not in screen,
            timeout_s=timeout_s,
            every_s=0.3,
        )

    def kill(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True, timeout=30)


@pytest.fixture
def tmux(tmp_path: Path) -> Iterator[Tmux]:
    if shutil.which("tmux") is None:
        if IN_CI:
            pytest.fail("CI=true and tmux is missing", pytrace=False)
        pytest.skip("tmux is not installed")
    session = Tmux(tmp_path)
    yield session
    session.kill()
