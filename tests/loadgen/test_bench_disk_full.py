"""A real full disk under ``infer-top bench --save`` (issue 22, docs/reliability.md): the
store lives on a small tmpfs this test mounts, and the run outgrows it. The bench says so
once, in words, and never claims the run was saved; every record written before the disk
filled is intact, and the run is listed as interrupted, never completed, never lost."""

from __future__ import annotations

import os
import sqlite3
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from store import open_store
from tests import disks
from tests.loadgen.conftest import ROOT, infer_top_argv

FAST = ("--ttft-ms", "2", "--ttft-spread-ms", "0", "--itl-ms", "1")


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 768 KiB tmpfs. The run below writes about 1.3 MB of store (a finished 2000-request
    run is a 1 MB file), so it fills whether or not the WAL is checkpointed as it goes: an
    earlier 1.5 MiB disk and 400 requests relied on the WAL growing, and a CI run whose
    writer kept up finished the run in 655 KB without a full disk."""
    with disks.small_disk(tmp_path / "disk", "768k") as path:
        yield path


def test_a_full_disk_mid_run_is_said_once_and_keeps_every_record_written(
    sched_server: Callable[..., Any], small_disk: Path
) -> None:
    server = sched_server(*FAST)
    db = small_disk / "runs.db"
    argv = infer_top_argv(
        "bench", "--quiet", "--url", server.url, "--model", "m", "--concurrency", "16",
        "--requests", "3000", "--input-len", "16", "--output-len", "4", "--save", "--db", str(db),
    )  # fmt: skip
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=120)
    err = done.stderr
    assert done.returncode == 1, err
    assert "Traceback" not in err
    assert "database or disk is full" in err and "infer-top runs prune" in err
    assert err.count("could not write") == 1, err[-3000:]  # said once, not per retry
    assert "saved to the store" not in err
    assert "is only partly in the store" in err

    disks.mount("-o", "remount,size=64m", str(small_disk))  # space comes back
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        stored = int(conn.execute("SELECT count(*) FROM requests").fetchone()[0])
    finally:
        conn.close()
    assert 0 < stored < 3000
    listed = subprocess.run(
        infer_top_argv("runs", "--db", str(db), "list"),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert listed.returncode == 0, listed.stderr
    with open_store(db) as st:
        (run,) = st.list_runs()
        records = list(st.iter_requests(run.run_id))
    assert run.status == "interrupted" and run.request_count == stored == len(records)
    assert len({r.request_index for r in records}) == stored
    assert all(r.ok and r.output_tokens == 4 for r in records)  # each one whole
    row = next(line for line in listed.stdout.splitlines() if run.run_id in line)
    assert "interrupted" in row and f" {stored} " in row
