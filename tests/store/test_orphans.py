"""A run whose process is gone is marked interrupted when the store opens; a
live one, a reused pid's, another host's and an old file's are judged right."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from store import open_store, owner
from tests.store.conftest import record

pytestmark = pytest.mark.skipif(
    owner.this_process().start is None, reason="process start identities need Linux /proc"
)


def _set_owner(path: Path, run_id: str, **columns: object) -> None:
    conn = sqlite3.connect(path)
    sets = ", ".join(f"owner_{name} = ?" for name in columns)
    conn.execute(f"UPDATE runs SET {sets} WHERE id = ?", (*columns.values(), run_id))
    conn.commit()
    conn.close()


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait(timeout=30)
    return child.pid


def test_runs_are_judged_by_their_process_and_host(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    me = owner.this_process()
    boot, namespace, ticks = (me.start or "").split("/")
    names = ("alive", "dead", "reused", "rebooted", "other-host", "pre-v4")
    with open_store(path) as st:
        ids = {name: st.create_run(name=name) for name in names}
        st.add_requests(record(ids["dead"], 0, i, t0=5000.0) for i in range(3))
    dead = _dead_pid()
    _set_owner(path, ids["dead"], pid=dead, start=f"{boot}/{namespace}/{ticks}")
    # This very pid, but a process started at another tick: the pid was reused.
    _set_owner(path, ids["reused"], start=f"{boot}/{namespace}/{int(ticks) + 1}")
    _set_owner(path, ids["rebooted"], start=f"another-boot/{namespace}/{ticks}")
    _set_owner(path, ids["other-host"], host="another-host", pid=dead)
    _set_owner(path, ids["pre-v4"], host=None, pid=None, start=None)

    with open_store(path) as st:
        status = {name: st.get_run(run_id).status for name, run_id in ids.items()}
        assert sorted(st.orphans_marked) == sorted(ids[n] for n in ("dead", "reused", "rebooted"))
        dead_run = st.get_run(ids["dead"])
    assert status == {
        "alive": "running",
        "dead": "interrupted",
        "reused": "interrupted",
        "rebooted": "interrupted",
        "other-host": "running",
        "pre-v4": "running",
    }
    # Finished when its last stored request ended; its requests are counted.
    assert dead_run.finished_at == record(ids["dead"], 0, 2, t0=5000.0).end_at
    assert dead_run.request_count == 3


def test_the_owner_is_this_process_and_its_identity_is_stable() -> None:
    me = owner.this_process()
    assert me.pid == os.getpid()
    assert owner.start_identity(os.getpid()) == me.start
    assert owner.start_identity(_dead_pid()) is None
    assert not owner.is_gone(me.host, me.pid, me.start)
