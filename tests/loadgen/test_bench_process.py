"""``infer-top bench`` as the real command, in a process of its own, against
stand-in engines that misbehave: what a script or CI job would see."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
from aiohttp import web

from engines.loadgen.records import ErrorKind
from store import open_store
from tests.loadgen.conftest import ROOT, infer_top_argv

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@pytest.fixture
async def serve() -> AsyncIterator[Callable[[Handler], Awaitable[str]]]:
    runners: list[web.AppRunner] = []

    async def start(handler: Handler) -> str:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", handler)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        runners.append(runner)
        return f"http://127.0.0.1:{runner.addresses[0][1]}"

    yield start
    for runner in runners:
        await runner.cleanup()


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


def _event(obj: object) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


# Request number -> the completion-token count the stand-in engine reports.
IMPOSSIBLE_USAGE = {3: 10**40, 5: -5}


async def _absurd_usage(request: web.Request) -> web.StreamResponse:
    """Four content chunks, then usage; requests 3 and 5 report impossible counts."""
    await request.read()
    n = int(request.headers["X-Request-Id"].rsplit("-", 1)[1])
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    for i in range(4):
        await resp.write(_event({"choices": [{"index": 0, "delta": {"content": f" t{i}"}}]}))
    await resp.write(_event({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}))
    usage = {"prompt_tokens": 7, "completion_tokens": IMPOSSIBLE_USAGE.get(n, 4)}
    await resp.write(_event({"choices": [], "usage": usage}) + b"data: [DONE]\n\n")
    await resp.write_eof()
    return resp


async def test_impossible_usage_fails_only_its_request_and_the_run_is_saved(
    serve: Callable[[Handler], Awaitable[str]], tmp_path: Path
) -> None:
    """A usage count of 10**40 once made the store writer retry forever: 0 requests
    saved, the run left `running`, the bench dead with a traceback."""
    url = await serve(_absurd_usage)
    db = tmp_path / "runs.db"
    code, out, err = await bench(
        "--url", url, "--model", "m", "--concurrency", "2", "--requests", "24",
        "--output-len", "4", "--save", "--db", str(db),
    )  # fmt: skip
    assert "Traceback" not in err, err
    assert code == 0, err  # 2 of 24 failed: under the default --max-failure-pct
    assert "failures at c=2: protocol 2" in out
    with open_store(db) as st:
        (run,) = st.list_runs()
        assert run.status == "completed" and run.request_count == 24
        records = list(st.iter_requests(run.run_id))
        (level,) = st.levels(run.run_id)
    failed = {r.request_index: r for r in records if not r.ok}
    assert set(failed) == set(IMPOSSIBLE_USAGE)
    assert all(r.error_kind is ErrorKind.PROTOCOL for r in failed.values())
    assert str(10**40) in (failed[3].error_message or "")
    assert "completion_tokens = -5" in (failed[5].error_message or "")
    assert all(r.output_tokens == 4 for r in records if r.ok)
    assert level.summary.failures_by_kind == {"protocol": 2}
    assert level.summary.total_output_tokens == 22 * 4 and level.summary.output_tok_s > 0
