"""Agent test fixtures: a real agent app on a loopback port, replaying the H200 trace."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from agents.client import AgentClient
from agents.config import AgentConfig
from agents.embedded import embedded_agent

TOKEN = "test-token-0123456789abcdef"


@pytest.fixture
def make_config(tmp_path: Path) -> Callable[..., AgentConfig]:
    def make(**overrides: Any) -> AgentConfig:
        values: dict[str, Any] = {
            "token": TOKEN,
            "platform": "replay",
            "port": 0,
            "interval_s": 0.2,
            "state_dir": tmp_path / "state",
            "node_name": "testnode",
            "adopt_on_start": False,
        }
        values.update(overrides)
        return AgentConfig(**values)

    return make


@pytest.fixture
async def agent(make_config: Callable[..., AgentConfig]) -> AsyncIterator[tuple[str, AgentClient]]:
    """A replay agent on 127.0.0.1:<free> with the sim runtime; yields (url, client)."""
    async with embedded_agent(make_config()) as (url, token), AgentClient(url, token) as client:
        yield url, client
