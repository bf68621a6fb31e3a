"""An agent inside the caller's event loop on 127.0.0.1 and a free port: the
TUI uses it when no agent is configured, and for the demo (replayed GPUs)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import replace

from aiohttp import web

from agents.config import AgentConfig, new_token
from agents.proxy import AgentAccessLogger
from agents.server import create_app


def embedded_config(**overrides: object) -> AgentConfig:
    """A loopback config with a fresh token and the replayed H200 unless told otherwise."""
    values: dict[str, object] = {"token": new_token(), "platform": "replay", "port": 0}
    values.update(overrides)
    return AgentConfig(**values)  # type: ignore[arg-type]


@contextlib.asynccontextmanager
async def embedded_agent(config: AgentConfig | None = None) -> AsyncIterator[tuple[str, str]]:
    """``async with embedded_agent(cfg) as (url, token):`` — the agent runs until the block ends."""
    config = replace(config or embedded_config(), host="127.0.0.1", port=0)
    runner = web.AppRunner(
        create_app(config),
        handle_signals=False,
        shutdown_timeout=5.0,
        access_log_class=AgentAccessLogger,
    )
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        port = runner.addresses[0][1]
        yield f"http://127.0.0.1:{port}", config.token
    finally:
        await runner.cleanup()
