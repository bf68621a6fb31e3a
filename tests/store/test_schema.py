"""Migrations: empty file, the committed v1 file, newer and foreign files."""

from __future__ import annotations

import hashlib
import shutil
import sqlite3
from pathlib import Path

import pytest

from store import SCHEMA_VERSION, StoreError, StoreVersionError, open_store
from tests.store.conftest import h200_levels, record

V1_FIXTURE = Path(__file__).parent / "fixtures" / "store-v1.db"
V1_TABLES = (
    "nodes",
    "deployments",
    "runs",
    "levels",
    "requests",
    "gpu_samples",
    "engine_samples",
    "events",
)


def _rows(path: Path, table: str, columns: list[str]) -> list[tuple[object, ...]]:
    conn = sqlite3.connect(path)
    try:
        return conn.execute(f"SELECT {', '.join(columns)} FROM {table} ORDER BY rowid").fetchall()
    finally:
        conn.close()


def _columns(path: Path, table: str) -> list[str]:
    conn = sqlite3.connect(path)
    try:
        return [r[1] for r in conn.execute(f"PRAGMA table_info({table})")]
    finally:
        conn.close()


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_empty_file_gets_every_table_and_the_current_version(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "dir" / "new.db"
    with open_store(path) as st:
        assert st.version_before == 0
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert set(V1_TABLES) | {"gpu_history", "_sqlite_migrations"} <= tables
    conn.close()
    # Opening again applies nothing twice.
    with open_store(path) as st:
        assert st.version_before == SCHEMA_VERSION


def test_v1_file_upgrades_without_losing_a_row(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    shutil.copy(V1_FIXTURE, path)
    before = {t: (_columns(path, t), _rows(path, t, _columns(path, t))) for t in V1_TABLES}
    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0] == 1
    assert len(before["requests"][1]) == sum(int(lv["requests"]) for lv in h200_levels())

    with open_store(path) as st:
        assert st.version_before == 1
        run = st.get_run("v1run000001")
        assert run.status == "completed" and run.level_count == 3
        assert run.software_versions == {"infer-top": "0.1.0", "llama.cpp": "b6000"}
        levels = st.levels(run.run_id)
        assert [lv.summary.concurrency for lv in levels] == [1, 8, 64]
        assert levels[2].summary.output_tok_s == 1502.2
        old_requests = list(st.iter_requests(run.run_id))
        assert len(old_requests) == len(before["requests"][1])
        assert old_requests[0].itl_s == ()  # v1 never kept the gaps
        # The upgraded file takes v2 rows next to the v1 ones.
        st.add_request(record(run.run_id, 9, 0))
        st.flush()
        assert st.request_count(run.run_id) == len(old_requests) + 1

    for table, (columns, rows) in before.items():
        after = _rows(path, table, columns)
        assert after[: len(rows)] == rows, f"{table} changed in the upgrade"
    assert "chunks_blob" in _columns(path, "requests")
    assert sqlite3.connect(path).execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_file_from_a_newer_infer_top_is_refused_and_left_unchanged(tmp_path: Path) -> None:
    path = tmp_path / "future.db"
    with open_store(path) as st:
        st.create_run(name="kept")
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    digest = _sha(path)
    with pytest.raises(StoreVersionError) as info:
        open_store(path)
    message = str(info.value)
    assert f"schema version {SCHEMA_VERSION + 1}" in message
    assert f"supports versions up to {SCHEMA_VERSION}" in message
    assert "Upgrade infer-top" in message
    assert info.value.file_version == SCHEMA_VERSION + 1
    assert _sha(path) == digest


def test_unknown_migration_name_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "branch.db"
    open_store(path).close()
    conn = sqlite3.connect(path)
    conn.execute(
        "INSERT INTO _sqlite_migrations (migration_set, name, applied_at) "
        "VALUES ('infer-top', '0003_from_the_future', 'x')"
    )
    conn.commit()
    conn.close()
    with pytest.raises(StoreVersionError, match="0003_from_the_future"):
        open_store(path)


def test_another_programs_database_is_not_written(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY, total REAL)")
    conn.commit()
    conn.close()
    digest = _sha(path)
    with pytest.raises(StoreError, match="another program"):
        open_store(path)
    assert _sha(path) == digest


def test_a_file_that_is_not_sqlite_gives_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "notes.db"
    path.write_bytes(b"these are my notes, not a database\n" * 200)
    with pytest.raises(StoreError, match="not a readable SQLite database"):
        open_store(path)
    assert path.read_bytes().startswith(b"these are my notes")


def test_default_path_follows_xdg_and_the_override(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from store import default_db_path

    monkeypatch.delenv("INFER_TOP_DB", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert default_db_path() == tmp_path / "xdg" / "infer-top" / "infer-top.db"
    with open_store() as st:
        st.create_run(name="x")
    assert (tmp_path / "xdg" / "infer-top" / "infer-top.db").exists()
    monkeypatch.setenv("INFER_TOP_DB", str(tmp_path / "elsewhere.db"))
    assert default_db_path() == tmp_path / "elsewhere.db"
