"""The store's single writer: one thread, one connection, fed by a queue.

Callers (the TUI's event loop, the load generator) only enqueue, so a write
never blocks them.  The thread groups whatever is queued into one
transaction (``executemany`` per statement), so the per-row cost stays a few
microseconds.  When a transaction fails for a reason that can pass (full disk,
locked DB) its rows stay held and are retried with back-off; the error is
reported through ``on_error`` and raised to ``flush()`` / ``close()``
callers — rows are never dropped silently.  A row that can never be written
(a value SQLite refuses, an integer past 64 bits) is never retried: it is set
aside in ``rejected`` and in the ``rejected_rows`` table (its values as JSON,
with the reason), reported the same way, and the rows around it are written.
"""

from __future__ import annotations

import json
import logging
import queue
import sqlite3
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from store.errors import StoreWriteError

log = logging.getLogger(__name__)

MAX_BATCH_ROWS = 50_000
RETRY_MAX_S = 2.0
INSERT_REJECTED = "INSERT INTO rejected_rows (ts, statement, row_json, error) VALUES (?, ?, ?, ?)"


@dataclass(slots=True)
class _Rows:
    sql: str
    rows: list[tuple[Any, ...]]


@dataclass(slots=True)
class _Call:
    fn: Callable[[sqlite3.Connection], Any]
    future: Future[Any] = field(default_factory=Future)


@dataclass(slots=True)
class _Flush:
    done: threading.Event = field(default_factory=threading.Event)
    error: StoreWriteError | None = None


_STOP = object()


class Writer:
    def __init__(
        self,
        conn: sqlite3.Connection,
        lock: threading.Lock,
        on_error: Callable[[StoreWriteError], None] | None = None,
        *,
        owns_conn: bool = True,
    ) -> None:
        self._conn = conn
        self._owns_conn = owns_conn
        self._lock = lock  # shared with readers only for a ":memory:" store
        self._on_error = on_error
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._held: list[_Rows] = []  # rows of failed transactions, in order
        self._held_count = 0
        self._last_error: StoreWriteError | None = None
        self._last_cause: str | None = None
        """SQLite's words for the failure now holding rows: logged once, not per retry."""
        self.rejected: list[tuple[str, tuple[Any, ...], str]] = []
        self._rejected_raised = 0
        self._closed = False
        self._thread = threading.Thread(
            target=self._run, name="infer-top-store-writer", daemon=True
        )
        self._thread.start()

    # --- called from any thread -------------------------------------------

    def put_rows(self, sql: str, rows: list[tuple[Any, ...]]) -> None:
        if self._closed:
            raise StoreWriteError("the store is closed; open it again to write")
        self._queue.put(_Rows(sql, rows))

    def put_row(self, sql: str, row: tuple[Any, ...]) -> None:
        """One row: the hot path (a plain pair on the queue, no allocation more)."""
        if self._closed:
            raise StoreWriteError("the store is closed; open it again to write")
        self._queue.put((sql, row))

    def call(self, fn: Callable[[sqlite3.Connection], Any]) -> Future[Any]:
        """Run ``fn(conn)`` on the writer thread after everything queued before it."""
        if self._closed:
            raise StoreWriteError("the store is closed; open it again to write")
        op = _Call(fn)
        self._queue.put(op)
        return op.future

    def flush(self, timeout_s: float | None = 30.0) -> None:
        """Wait until everything queued so far is committed (or raise why not)."""
        op = _Flush()
        self._queue.put(op)
        if not op.done.wait(timeout_s):
            raise StoreWriteError(
                f"the store writer did not catch up within {timeout_s} s; "
                "rows stay queued and are still being written",
                unsaved=self._queue.qsize() + self._held_count,
            )
        if op.error is not None:
            raise op.error

    def close(self, timeout_s: float | None = 30.0) -> None:
        if self._closed:
            return
        error: StoreWriteError | None = None
        try:
            self.flush(timeout_s)
        except StoreWriteError as exc:
            error = exc
        self._closed = True
        self._queue.put(_STOP)
        self._thread.join(timeout_s)
        if self._owns_conn and not self._thread.is_alive():
            with self._lock:
                self._conn.close()
        if error is not None and error.unsaved:
            raise StoreWriteError(
                f"closing the store left {error.unsaved} rows unwritten: {error}",
                unsaved=error.unsaved,
                rejected=error.rejected,
            ) from error
        if error is not None:
            raise error

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def unsaved(self) -> int:
        return self._held_count

    # --- the writer thread -------------------------------------------------

    def _run(self) -> None:
        backoff_s = 0.05
        while True:
            try:
                item = self._queue.get(timeout=backoff_s if self._held else None)
            except queue.Empty:
                item = None
            barriers: list[Any] = []
            rows = 0
            get = self._queue.get_nowait
            held = self._held
            while item is not None:
                # One executemany per run of rows with the same statement.
                if type(item) is tuple:
                    sql, row = item
                    if held and held[-1].sql is sql:
                        held[-1].rows.append(row)
                    else:
                        held.append(_Rows(sql, [row]))
                    rows += 1
                elif isinstance(item, _Rows):
                    if held and held[-1].sql is item.sql:
                        held[-1].rows.extend(item.rows)
                    else:
                        held.append(_Rows(item.sql, list(item.rows)))
                    rows += len(item.rows)
                else:
                    barriers.append(item)
                    break  # commit what came before it first
                if rows >= MAX_BATCH_ROWS:
                    break
                try:
                    item = get()
                except queue.Empty:
                    break
            self._held_count += rows
            ok = self._commit_held()
            backoff_s = 0.05 if ok else min(backoff_s * 2, RETRY_MAX_S)
            for it in barriers:
                if isinstance(it, _Call):
                    self._run_call(it)
                elif isinstance(it, _Flush):
                    it.error = self._flush_error(ok)
                    it.done.set()
                elif it is _STOP:
                    if self._held:
                        log.error("store closed with %d rows unwritten", self._held_count)
                    return

    def _flush_error(self, ok: bool) -> StoreWriteError | None:
        if not ok:
            last = self._last_error
            message = str(last) if last is not None else "rows are not written yet"
            return StoreWriteError(message, unsaved=self._held_count, rejected=len(self.rejected))
        new_rejects = len(self.rejected) - self._rejected_raised
        if new_rejects:
            # Raised once per flush, so the caller hears of them exactly once.
            self._rejected_raised = len(self.rejected)
            return StoreWriteError(
                f"{new_rejects} rows had values SQLite refused and were set aside "
                f"(last: {self.rejected[-1][2]}); they are kept in the store's "
                "rejected_rows table",
                rejected=len(self.rejected),
            )
        return None

    def _run_call(self, op: _Call) -> None:
        try:
            with self._lock:
                result = op.fn(self._conn)
        except BaseException as exc:
            op.future.set_exception(exc)
        else:
            op.future.set_result(result)

    def _commit_held(self) -> bool:
        if not self._held:
            return True
        try:
            try:
                with self._lock:
                    self._transaction(self._held)
            except Exception as exc:
                if not _is_row_error(exc):
                    raise
                # A value that cannot be written would fail every retry and
                # hold up every row behind it: find those rows and set them
                # aside, write the rest.
                with self._lock:
                    self._transaction(self._held, one_by_one=True)
        except Exception as exc:
            # Full disk, locked DB, I/O error: may pass; keep the rows.
            self._report(
                StoreWriteError(
                    f"could not write {self._held_count} rows to the store: {exc}. "
                    + _advice(exc)
                    + " The rows are kept in memory and retried.",
                    unsaved=self._held_count,
                    rejected=len(self.rejected),
                ),
                cause=str(exc),
            )
            return False
        if self._last_cause is not None:
            log.warning("the store writes again: every held row is written")
        self._held.clear()
        self._held_count = 0
        self._last_error = None
        self._last_cause = None
        return True

    def _transaction(self, batches: list[_Rows], one_by_one: bool = False) -> None:
        conn = self._conn
        refused: list[tuple[str, tuple[Any, ...], str]] = []
        conn.execute("BEGIN IMMEDIATE")
        try:
            for batch in batches:
                if not one_by_one:
                    conn.executemany(batch.sql, batch.rows)
                    continue
                for row in batch.rows:
                    try:
                        conn.execute(batch.sql, row)
                    except Exception as exc:
                        if not _is_row_error(exc):
                            raise
                        refused.append((batch.sql, row, str(exc)))
            if refused:  # kept in the file, so nothing is lost with the process
                now = time.time()
                conn.executemany(
                    INSERT_REJECTED,
                    [(now, sql, _row_json(row), why) for sql, row, why in refused],
                )
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        if refused:
            self.rejected.extend(refused)
            self._report(
                StoreWriteError(
                    f"{len(refused)} rows had values SQLite refused and were set aside "
                    f"(last: {refused[-1][2]}); they are kept in the store's rejected_rows table",
                    rejected=len(self.rejected),
                )
            )

    def _report(self, error: StoreWriteError, cause: str | None = None) -> None:
        """Log ``error`` (a retry of the same ``cause``, more rows held, only once) and hand
        it to ``on_error``."""
        if cause is None or cause != self._last_cause:
            log.error("%s", error)
        self._last_error, self._last_cause = error, cause
        if self._on_error is not None:
            try:
                self._on_error(error)
            except Exception:
                log.exception("the store's on_error callback failed")


def _is_row_error(exc: BaseException) -> bool:
    """True when the failure is the row's own values (a retry would fail the same);
    OperationalError (locked, full, I/O) and MemoryError may pass."""
    if isinstance(exc, sqlite3.OperationalError):
        return False
    return isinstance(exc, sqlite3.Error | OverflowError | TypeError | ValueError)


def _row_json(row: tuple[Any, ...]) -> str:
    """A refused row as text that can always be stored (blobs as hex, the rest as repr)."""
    return json.dumps(list(row), default=lambda v: v.hex() if isinstance(v, bytes) else repr(v))


def _advice(exc: BaseException) -> str:
    text = str(exc).lower()
    if "full" in text:
        return (
            "Free disk space (or raise the store's size limit), or prune old telemetry with "
            "`infer-top runs prune --older-than 7d`."
        )
    if "locked" in text or "busy" in text:
        return "Another program holds the database lock; close it (e.g. a sqlite3 shell)."
    return "Check the database file's disk and permissions."
