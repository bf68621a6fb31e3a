"""Connection reuse follows where the requests go, not only the engine's kind.

llama-server closes its connection after every streamed answer, so a load aimed at it gets
a fresh connection per request. Aimed at an agent's proxy route instead, the agent keeps
the client's connection alive (it opens its own to the engine), and a fresh connection per
request would only cost a connect and a close on both hosts (benchmarks/proxy_bench.py).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from aiohttp import web

from loadgen import LoadSpec, MemorySink, Target, Workload, concurrency_sweep, run_load
from tests.loadgen.conftest import Handler

REQUESTS = 12
STREAMS = 2


@pytest.mark.parametrize(("through_proxy", "most_connections"), [(False, 12), (True, 2)])
async def test_a_load_through_the_agents_proxy_keeps_its_connections(
    serve: Callable[[Handler], Awaitable[str]],
    fixtures_dir: Path,
    through_proxy: bool,
    most_connections: int,
) -> None:
    payload = (fixtures_dir / "llamacpp-live" / "chat-stream-with-usage.txt").read_bytes()
    peers: list[tuple[str, int]] = []

    async def handler(request: web.Request) -> web.StreamResponse:
        await request.read()
        peers.append(request.transport.get_extra_info("peername") if request.transport else "")
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(payload)
        await resp.write_eof()  # the connection stays open: it is the client's to reuse
        return resp

    url = await serve(handler)
    target = Target(url, "tiny", engine_kind="llamacpp", through_proxy=through_proxy)
    spec = LoadSpec(concurrency_sweep([STREAMS]), requests_per_level=REQUESTS)
    result = await run_load(spec, Workload(input_len=16, output_len=8), target, MemorySink())

    (level,) = result.levels
    assert level.completed == REQUESTS, level.failures_by_kind
    assert len(peers) == REQUESTS
    connections = len(set(peers))
    if through_proxy:
        assert connections <= most_connections, f"{connections} connections for {REQUESTS}"
    else:  # llama-server's quirk: one connection per request
        assert connections == most_connections
