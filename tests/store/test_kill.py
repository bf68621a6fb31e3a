"""A store process killed with SIGKILL mid-write leaves a sound file with
every request it had reported committed, and its run is marked interrupted."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

from store import open_store

ROOT = Path(__file__).parents[2]


def test_sigkill_during_writes_keeps_every_committed_request(tmp_path: Path) -> None:
    path = tmp_path / "killed.db"
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.store.kill_child", str(path)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    committed = -1
    try:
        assert child.stdout is not None
        for line in child.stdout:
            committed = int(line)
            if committed >= 15_000:
                break
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=30)
    assert child.returncode == -signal.SIGKILL, child.stderr.read() if child.stderr else ""
    assert committed >= 15_000
    # The WAL still holds the last transactions: a plain connection must see them.
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    indices = {r[0] for r in conn.execute("SELECT request_index FROM requests")}
    conn.close()
    assert set(range(committed + 1)) <= indices
    # ...and the store opens it, sees the run's process is gone, and goes on.
    with open_store(path) as st:
        run = st.get_run("killedrun")
        assert run.status == "interrupted" and run.finished_at is not None
        assert st.request_count("killedrun") == run.request_count == len(indices)
