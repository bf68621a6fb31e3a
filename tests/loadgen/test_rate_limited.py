"""An engine that answers 429 under load: the refusals are counted as their own kind
(not lumped with other HTTP errors), and a TGI launched from the catalog does not
refuse the load its batch cap is meant to queue.

The stand-in imitates TGI's router (text-generation-inference v3.3.4): past
``--max-concurrent-requests`` requests in flight it answers 429 at once
(router/src/server.rs: ``InferError::Overloaded`` -> TOO_MANY_REQUESTS); the rest wait
for one of ``--max-batch-size`` batch places (backends/v3/src/backend.rs).
"""

from __future__ import annotations

import asyncio
import csv
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from aiohttp import web

from engines.catalog import LaunchConfig, get_spec
from loadgen import ClosedLoop, LoadSpec, MemorySink, Target, Workload, run_load
from runs.records import ErrorKind
from store import open_store
from store.export import comparison_to_csv, comparison_to_markdown
from tests.loadgen.conftest import Handler, bench


def _event(obj: object) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


@dataclass
class Router:
    """TGI's admission: ``max_concurrent`` in flight, ``max_batch`` of them decoding."""

    max_concurrent: int
    max_batch: int | None = None
    in_flight: int = 0
    decoding: int = 0
    peak_decoding: int = 0
    refused: int = 0
    batch: asyncio.Semaphore | None = field(default=None, init=False)

    @classmethod
    def from_flags(cls, args: list[str]) -> Router:
        def value(flag: str) -> int | None:
            return int(args[args.index(flag) + 1]) if flag in args else None

        # TGI's own default when the flag is absent (launcher/src/main.rs)
        return cls(value("--max-concurrent-requests") or 128, value("--max-batch-size"))

    async def handle(self, request: web.Request) -> web.StreamResponse:
        await request.read()
        if self.in_flight >= self.max_concurrent:
            self.refused += 1
            body = {"error": "Model is overloaded", "error_type": "overloaded"}
            return web.json_response(body, status=429)
        self.in_flight += 1
        try:
            if self.batch is None:
                self.batch = asyncio.Semaphore(self.max_batch or self.max_concurrent)
            async with self.batch:
                self.decoding += 1
                self.peak_decoding = max(self.peak_decoding, self.decoding)
                try:
                    return await self._stream(request)
                finally:
                    self.decoding -= 1
        finally:
            self.in_flight -= 1

    @staticmethod
    async def _stream(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for i in range(4):
            await asyncio.sleep(0.005)  # a decode step: the batch stays full a while
            await resp.write(_event({"choices": [{"index": 0, "delta": {"content": f" t{i}"}}]}))
        done = {"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}
        await resp.write(_event(done) + b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp


async def test_429s_are_rate_limited_in_the_bench_output_csv_and_the_export(
    serve: Callable[[Handler], Awaitable[str]], tmp_path: Path
) -> None:
    router = Router(max_concurrent=3)
    url = await serve(router.handle)
    db, out_csv = tmp_path / "runs.db", tmp_path / "levels.csv"
    code, out, err = await bench(
        "--url", url, "--model", "m", "--concurrency", "8", "--requests", "40",
        "--output-len", "4", "--max-failure-pct", "100", "--csv", str(out_csv),
        "--save", "--db", str(db),
    )  # fmt: skip
    assert code == 0, err
    assert router.refused > 0
    assert f"failures at c=8: rate-limited (429) {router.refused}" in out
    (row,) = csv.DictReader(out_csv.open())
    assert row["failures_by_kind"] == f"rate_limited={router.refused}"

    with open_store(db) as st:
        (run,) = st.list_runs()
        records = list(st.iter_requests(run.run_id))
        comparison = st.compare([run.run_id])
    refused = [r for r in records if not r.ok]
    assert len(refused) == router.refused
    assert {(r.error_kind, r.http_status) for r in refused} == {(ErrorKind.RATE_LIMITED, 429)}
    assert f"rate-limited (429) {router.refused}" in comparison_to_markdown(comparison)
    (exported,) = csv.DictReader(comparison_to_csv(comparison).splitlines())
    assert exported["failures_by_kind"] == f"rate_limited={router.refused}"


async def test_other_http_errors_stay_apart_from_429(
    serve: Callable[[Handler], Awaitable[str]],
) -> None:
    calls = 0

    async def alternate(request: web.Request) -> web.StreamResponse:
        nonlocal calls
        await request.read()
        calls += 1
        return web.json_response({"error": "busy"}, status=429 if calls % 2 else 500)

    url = await serve(alternate)
    spec = LoadSpec((ClosedLoop(1),), requests_per_level=6)
    result = await run_load(
        spec, Workload(input_len=4, output_len=4), Target(url, "m"), MemorySink()
    )
    assert result.levels[0].failures_by_kind == {"rate_limited": 3, "http_status": 3}


async def test_tgi_queues_past_its_batch_cap_instead_of_refusing(
    serve: Callable[[Handler], Awaitable[str]],
) -> None:
    """max_num_seqs once became --max-concurrent-requests: every request past the cap
    got a 429, so TGI lost a sweep by refusing what vLLM queues."""
    args = get_spec("tgi").command_args(LaunchConfig(model="m", max_num_seqs=8))
    router = Router.from_flags(args)
    url = await serve(router.handle)
    spec = LoadSpec((ClosedLoop(16),), requests_per_level=48)
    result = await run_load(
        spec, Workload(input_len=4, output_len=4), Target(url, "m"), MemorySink()
    )
    level = result.levels[0]
    assert level.failures_by_kind == {} and level.completed == 48
    assert router.refused == 0
    assert router.peak_decoding == 8  # the batch cap held; the rest waited in the queue
