"""``infer-top bench`` as the real command, in a process of its own, against
stand-in engines that misbehave: what a script or CI job would see."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from aiohttp import web

from runs.records import ErrorKind
from store import open_store
from tests.loadgen.conftest import ROOT, Handler, bench, infer_top_argv


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


SLOW = ("--ttft-ms", "5", "--ttft-spread-ms", "0", "--itl-ms", "20")  # 25 tokens: 0.5 s


def stored_requests(db: Path) -> int:
    """Requests committed so far, read as another program would (0 before the file is)."""
    if not db.exists():
        return 0
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
    try:
        return int(conn.execute("SELECT count(*) FROM requests").fetchone()[0])
    except sqlite3.OperationalError:  # the schema is still being created
        return 0
    finally:
        conn.close()


@contextmanager
def _bench_running(url: str, db: Path, *, stored: int) -> Iterator[subprocess.Popen[str]]:
    """A long ``bench --save`` (a real process), yielded once ``stored`` requests are in."""
    argv = infer_top_argv(
        "bench", "--quiet", "--url", url, "--model", "m", "--concurrency", "4",
        "--requests", "400", "--output-len", "25", "--save", "--db", str(db),
    )  # fmt: skip
    proc = subprocess.Popen(
        argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 60
        while stored_requests(db) < stored:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the bench stored too few requests in 60 s"
            time.sleep(0.1)
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=30)


def _runs(db: Path, *argv: str) -> str:
    """``infer-top runs ARGV`` as a user runs it; its output."""
    done = subprocess.run(
        infer_top_argv("runs", "--db", str(db), *argv),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_sigterm_interrupts_the_bench_like_ctrl_c_and_keeps_its_records(
    sched_server: Callable[..., Any], tmp_path: Path
) -> None:
    """`timeout`, systemd and CI stop with SIGTERM: the run used to stay `running`."""
    server = sched_server(*SLOW)
    db = tmp_path / "runs.db"
    with _bench_running(server.url, db, stored=8) as proc:
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    assert "interrupted by SIGTERM" in err and "Traceback" not in err
    with open_store(db) as st:
        (run,) = st.list_runs()
        records = list(st.iter_requests(run.run_id))
    assert run.status == "interrupted" and run.finished_at is not None
    assert len(records) >= 8 and run.request_count == len(records)
    assert any(r.incomplete for r in records)  # the requests in flight, recorded as cut
    row = next(line for line in _runs(db, "list").splitlines() if run.run_id in line)
    assert "interrupted" in row and f" {len(records)} " in row


def test_a_sigkilled_bench_is_marked_interrupted_when_the_store_next_opens(
    sched_server: Callable[..., Any], tmp_path: Path
) -> None:
    server = sched_server(*SLOW)
    db = tmp_path / "runs.db"
    with _bench_running(server.url, db, stored=8) as proc:
        proc.kill()
        proc.communicate(timeout=30)
    stored = stored_requests(db)
    conn = sqlite3.connect(db)  # as the kill left it: the WAL not yet checkpointed
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    finally:
        conn.close()
    listed = _runs(db, "list")  # the first open after the kill
    with open_store(db) as st:
        (run,) = st.list_runs()
        records = list(st.iter_requests(run.run_id))
    last_end = max(r.end_at or r.sent_at for r in records)
    assert all(r.ok and r.output_tokens == 25 for r in records)  # every finished one whole
    assert run.status == "interrupted" and run.finished_at == last_end
    assert run.request_count == stored >= 8
    row = next(line for line in listed.splitlines() if run.run_id in line)
    assert "interrupted" in row and f" {stored} " in row
    shown = _runs(db, "show", run.run_id)
    assert "status interrupted" in shown and f"{stored} requests stored" in shown


def test_a_bench_whose_requests_mostly_failed_exits_1_and_counts_them_by_kind(
    sched_server: Callable[..., Any],
) -> None:
    """87 % of requests failed and the bench exited 0: scripts and CI never noticed."""
    server = sched_server("--faults", "mix", "--ttft-ms", "5", "--ttft-spread-ms", "5")
    argv = infer_top_argv(
        "bench", "--quiet", "--url", server.url, "--model", "m", "--concurrency", "6",
        "--requests", "36", "--output-len", "6", "--stall-timeout", "500ms",
    )  # fmt: skip
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stderr
    assert "30 of 36 requests failed (83.3%), more than --max-failure-pct 10:" in done.stderr
    for kind in ("http_status", "broken_stream", "timeout", "connect", "no_content"):
        assert f"{kind} 6" in done.stderr
    # The threshold is the caller's: the same run passes a looser one.
    looser = [*argv, "--max-failure-pct", "90"]
    done = subprocess.run(looser, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "requests failed" not in done.stderr
