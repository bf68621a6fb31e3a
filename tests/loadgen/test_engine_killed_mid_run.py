"""The rig's real llama-server, SIGKILLed in the middle of a load run: the run still ends
(bounded), every request sent has exactly one record in the JSONL sink, the requests the
kill cut or refused are failures counted by kind, and what succeeded before is intact."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from loadgen import (
    ErrorKind,
    JsonlSink,
    LoadSpec,
    PromptSource,
    RequestRecord,
    Target,
    Workload,
    concurrency_sweep,
    read_jsonl,
    run_load,
)
from tests.conftest import Rig
from tests.loadgen.test_llama_server_live import _wait_health
from tests.rig.test_llama_server_compose import free_port

pytestmark = pytest.mark.docker  # the rig's llama-server binary and tiny model

REQUESTS = 40
CONCURRENCY = 4
SUCCESSES_BEFORE_KILL = 6
WORKLOAD = Workload(input_len=16, output_len=256, range_ratio=0.5, seed=3)
"""Lengths from 128 to 384 tokens: the four streams soon run out of step, so the kill
finds them at different points of their answers."""


@pytest.fixture
def llama_server(rig: Rig, tmp_path: Path) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """The rig's llama-server as a process on 127.0.0.1, a slot per worker; killed
    afterwards whatever the test did."""
    port = free_port()
    argv = [str(rig.llama_server_bin), "-m", str(rig.tiny_model), "--host", "127.0.0.1",
            "--port", str(port), "-np", str(CONCURRENCY), "-c", "4096", "-t", "1",
            "--metrics"]  # fmt: skip
    with (tmp_path / "llama-server.log").open("wb") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    try:
        yield f"http://127.0.0.1:{port}", proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)


class KillingSink(JsonlSink):
    """The JSONL sink, which SIGKILLs the engine the moment the n-th successful record
    has been written: the kill is synchronised on records, not on a clock."""

    def __init__(self, path: Path, engine: subprocess.Popen[bytes], after_successes: int) -> None:
        super().__init__(path)
        self.engine, self.after = engine, after_successes
        self.written: list[RequestRecord] = []
        self.before_kill: list[RequestRecord] | None = None
        self.killed_at: float | None = None

    def write(self, record: RequestRecord) -> None:
        super().write(record)
        self.written.append(record)
        if self.before_kill is None and sum(r.ok for r in self.written) >= self.after:
            self.engine.send_signal(signal.SIGKILL)
            self.killed_at = time.time()
            self.before_kill = list(self.written)


async def test_engine_killed_mid_run_loses_no_record(
    llama_server: tuple[str, subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    url, engine = llama_server
    await _wait_health(url)
    path = tmp_path / "run.jsonl"
    sink = KillingSink(path, engine, SUCCESSES_BEFORE_KILL)
    spec = LoadSpec(
        concurrency_sweep([CONCURRENCY]),
        requests_per_level=REQUESTS,
        request_timeout_s=30,
        stall_timeout_s=10,
    )
    try:
        async with asyncio.timeout(90):  # a run that hangs on a dead engine fails here
            result = await run_load(
                spec, WORKLOAD, Target(url, "tiny", engine_kind="llamacpp"), sink
            )
    finally:
        sink.close()
    assert engine.wait(timeout=10) == -signal.SIGKILL
    before, killed_at = sink.before_kill, sink.killed_at
    assert before is not None and killed_at is not None

    # Exactly one record per request sent, in the file as in the result.
    records, levels = read_jsonl(path)
    assert result.records_written == len(records) == REQUESTS
    assert sorted(r.request_index for r in records) == list(range(REQUESTS))
    assert {(r.run_id, r.level_index) for r in records} == {(result.run_id, 0)}
    assert records == sink.written

    # What succeeded before the kill is intact, and so in the file.
    assert records[: len(before)] == before
    prompts = PromptSource(WORKLOAD)
    for record in (r for r in records if r.ok):
        # A success is a whole answer. One may end a moment after the kill: its last
        # bytes were already on their way when the engine died, so no end-time bound.
        assert record.output_tokens == prompts.item(record.request_index).output_len
        assert record.first_token_at is not None and not record.incomplete

    # The requests the kill caught in flight (the other workers') and every one sent
    # afterwards are failures, each counted by its kind: none lost, none left open.
    after = records[len(before) :]
    in_flight = [r for r in after if r.scheduled_at < killed_at]
    assert len(in_flight) == CONCURRENCY - 1
    assert all(
        r.ok or r.error_kind in (ErrorKind.BROKEN_STREAM, ErrorKind.CONNECT) for r in in_flight
    )
    assert any(not r.ok and r.chunk_count > 0 for r in in_flight), "no stream was cut mid-answer"
    later = [r for r in after if r.scheduled_at > killed_at]
    assert len(later) == REQUESTS - len(before) - len(in_flight)
    assert all(r.error_kind is ErrorKind.CONNECT for r in later)
    failed = [r for r in records if not r.ok]
    kinds = Counter(str(r.error_kind) for r in failed)
    assert set(kinds) <= {ErrorKind.CONNECT, ErrorKind.BROKEN_STREAM, ErrorKind.HTTP_STATUS}
    assert not any(r.incomplete for r in records)

    (summary,) = result.levels
    assert levels == [summary]
    ok = len(records) - len(failed)
    assert (summary.completed, summary.failed, summary.incomplete) == (ok, len(failed), 0)
    assert summary.failures_by_kind == dict(kinds)
    assert ok >= SUCCESSES_BEFORE_KILL and len(failed) >= len(later) > 0
