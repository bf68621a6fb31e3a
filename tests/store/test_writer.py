"""The writer: exact round trips, full disk, locked DB, refused values."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from store import Store, StoreWriteError, open_store
from tests.store.conftest import cap_file_bytes, failed_record, record, summary_from_h200


def test_requests_and_levels_read_back_equal(mem_store: Store) -> None:
    run_id = mem_store.create_run(name="rt", engine_kind="llamacpp", node="n1")
    records = [record(run_id, 0, i) for i in range(20)]
    records.append(failed_record(run_id, 0, 20))
    records.append(record(run_id, 0, 21, incomplete=True, prompt_tokens=None))
    # Fields the contract gained beyond the stored columns (kept as JSON) survive too.
    records.append(record(run_id, 0, 22, warmup=True, server_decode_tok_s=812.5))
    mem_store.add_requests(records[:5])
    for r in records[5:]:
        mem_store.add_request(r)
    summary = summary_from_h200(2, failed=3)
    mem_store.add_level(run_id, summary)
    mem_store.flush()
    assert list(mem_store.iter_requests(run_id)) == records
    (level,) = mem_store.levels(run_id)
    assert level.summary == summary
    # Counted from the stored rows, not from the level summaries.
    assert mem_store.get_run(run_id).request_count == len(records)


@pytest.mark.parametrize(
    "tokens", [(), (1,) * 40, (255, 0, 3), (256, 1), (70_000, 2, 1), (-1, 5)], ids=str
)
def test_chunk_payload_round_trips_any_token_counts(
    mem_store: Store, tokens: tuple[int, ...]
) -> None:
    run_id = mem_store.create_run(name="chunks")
    gaps = tuple(1e-3 / (k + 1) for k in range(max(len(tokens) - 1, 0)))
    rec = record(run_id, 0, 0, itl_s=gaps, tokens_per_chunk=tokens)
    mem_store.add_request(rec)
    mem_store.flush()
    (back,) = mem_store.iter_requests(run_id)
    assert (back.itl_s, back.tokens_per_chunk) == (gaps, tokens)


def test_requests_come_back_in_order_across_read_pages(mem_store: Store) -> None:
    run_id = mem_store.create_run(name="pages")
    for level in (1, 0):  # stored out of order on purpose
        mem_store.add_requests(record(run_id, level, i) for i in range(6000))
    mem_store.flush()
    keys = [(r.level_index, r.request_index) for r in mem_store.iter_requests(run_id)]
    assert keys == [(lv, i) for lv in (0, 1) for i in range(6000)]


def test_same_request_written_twice_is_kept_once(mem_store: Store) -> None:
    run_id = mem_store.create_run(name="dup")
    mem_store.add_request(record(run_id, 0, 0, output_tokens=10))
    mem_store.add_request(record(run_id, 0, 0, output_tokens=11))
    mem_store.flush()
    assert [r.output_tokens for r in mem_store.iter_requests(run_id)] == [11]


def test_full_disk_is_reported_and_no_row_is_lost(tmp_path: Path) -> None:
    errors: list[StoreWriteError] = []
    st = open_store(tmp_path / "small.db", on_error=errors.append)
    cap_file_bytes(st, 256 * 1024)
    run_id = st.create_run(name="big")
    st.flush()
    st.add_requests(record(run_id, 0, i) for i in range(3000))
    with pytest.raises(StoreWriteError) as info:
        st.flush()
    assert "full" in str(info.value)
    assert "infer-top runs prune" in str(info.value)
    assert info.value.unsaved == 3000
    assert errors and errors[-1].unsaved == 3000
    # More rows keep queueing while the disk is full.
    st.add_requests(record(run_id, 1, i) for i in range(10))
    # Space comes back: everything held is written, in order, nothing lost.
    cap_file_bytes(st, None)
    st.flush()
    assert st.unsaved == 0
    assert st.request_count(run_id) == 3010
    st.close()
    conn = sqlite3.connect(tmp_path / "small.db")
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_close_on_a_full_disk_says_how_many_rows_were_not_written(tmp_path: Path) -> None:
    st = open_store(tmp_path / "small.db")
    cap_file_bytes(st, 200 * 1024)
    run_id = st.create_run(name="big")
    st.add_requests(record(run_id, 0, i) for i in range(3000))
    with pytest.raises(StoreWriteError, match=r"\d+ rows unwritten") as info:
        st.close(timeout_s=10)
    assert info.value.unsaved >= 3000


def test_locked_database_is_retried_once_the_lock_goes(tmp_path: Path) -> None:
    path = tmp_path / "locked.db"
    st = open_store(path, busy_timeout_s=0.05)
    run_id = st.create_run(name="locked")
    st.flush()
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")
    try:
        st.add_requests(record(run_id, 0, i) for i in range(50))
        with pytest.raises(StoreWriteError, match="locked"):
            st.flush()
        assert st.unsaved == 50
    finally:
        other.execute("ROLLBACK")
        other.close()
    st.flush()
    assert st.request_count(run_id) == 50
    st.close()


def test_a_row_sqlite_refuses_is_set_aside_and_the_rest_written(mem_store: Store) -> None:
    run_id = mem_store.create_run(name="bad")
    mem_store.add_request(record(run_id, 0, 0))
    mem_store.add_request(record(run_id, 0, 1, prompt_tokens=["not", "an", "int"]))
    mem_store.add_request(record(run_id, 0, 2))
    with pytest.raises(StoreWriteError, match="refused") as info:
        mem_store.flush()
    assert info.value.rejected == 1
    assert [r.request_index for r in mem_store.iter_requests(run_id)] == [0, 2]
    (rejected,) = mem_store.rejected
    assert rejected[1][2] == 1  # the row itself is kept for the caller
    mem_store.flush()  # reported once, not on every later flush


def test_writes_after_close_are_refused(tmp_path: Path) -> None:
    st = open_store(tmp_path / "c.db")
    st.close()
    with pytest.raises(StoreWriteError, match="closed"):
        st.create_run(name="late")


def test_a_row_that_can_never_be_written_is_set_aside_not_retried_forever(
    file_store: Store,
) -> None:
    """An integer past 64 bits (OverflowError, not a sqlite3 error) once held up
    every row behind it: the writer retried it forever and the run stayed running."""
    run_id = file_store.create_run(name="huge")
    file_store.add_request(record(run_id, 0, 0))
    file_store.add_request(record(run_id, 0, 1, usage_completion_tokens=10**40))
    file_store.add_request(record(run_id, 0, 2))
    file_store.finish_run(run_id)
    with pytest.raises(StoreWriteError, match="set aside") as info:
        file_store.flush(timeout_s=10)
    assert info.value.rejected == 1 and info.value.unsaved == 0
    assert "rejected_rows" in str(info.value)
    assert file_store.unsaved == 0
    assert [r.request_index for r in file_store.iter_requests(run_id)] == [0, 2]
    assert file_store.get_run(run_id).status == "completed"
    # The row survives in the file with its reason, not only in this process.
    conn = sqlite3.connect(file_store.path)
    ((statement, row_json, error),) = conn.execute(
        "SELECT statement, row_json, error FROM rejected_rows"
    ).fetchall()
    conn.close()
    assert statement.startswith("INSERT") and "requests" in statement
    assert str(10**40) in row_json and "too large" in error
    file_store.add_request(record(run_id, 0, 3))  # and the writer goes on
    file_store.flush()
    assert file_store.request_count(run_id) == 3
