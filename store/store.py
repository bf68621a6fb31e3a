"""``Store``: everything infer-top measures, in one SQLite file.

Writes are enqueued to one writer thread (see ``store.writer``), so calling
``add_request`` from the TUI's event loop costs microseconds.  Reads use a
separate read connection (WAL lets them run while the writer commits); from
an event loop, call them in a worker thread (``asyncio.to_thread``, as the TUI
does) so a slow query never stalls it.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from runs.records import LevelSummary, RequestRecord
from store import energy, maintenance, owner, queries
from store.alerts import AlertsMixin
from store.errors import StoreError, StoreWriteError
from store.fleet import FleetMixin, dumps
from store.models import (
    INSERT_LEVEL,
    INSERT_REQUEST,
    Comparison,
    LevelRow,
    Regression,
    RunInfo,
    level_to_row,
    request_to_row,
)
from store.schema import migrate
from store.writer import Writer

log = logging.getLogger(__name__)

MEMORY = ":memory:"
DEFAULT_TELEMETRY_RETENTION_S = 7 * 86400.0
RETENTION_CHECK_S = 3600.0
PAGE_CACHE_KIB = 1024
"""SQLite's page cache per connection (a store has two: the writer's and the reader's);
SQLite's default is 2000 KiB."""


def default_db_path() -> Path:
    """``$INFER_TOP_DB``, else ``$XDG_DATA_HOME/infer-top/infer-top.db``."""
    override = os.environ.get("INFER_TOP_DB")
    if override:
        return Path(override).expanduser()
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "infer-top" / "infer-top.db"


class Store(FleetMixin, AlertsMixin):
    def __init__(
        self,
        path: Path | str,
        *,
        busy_timeout_s: float = 5.0,
        on_error: Callable[[StoreWriteError], None] | None = None,
        telemetry_retention_s: float | None = DEFAULT_TELEMETRY_RETENTION_S,
    ) -> None:
        """``telemetry_retention_s``: per-second samples taken outside runs are
        deleted once older than this (checked hourly while telemetry comes in;
        None keeps them all).  Samples inside runs stay: energy comes from them."""
        self.path = path
        self._retention_s = telemetry_retention_s
        self._next_prune = 0.0
        self.memory = str(path) == MEMORY
        if not self.memory:
            # Private by default: runs name hosts, models, images and settings.
            Path(path).parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        conn = self._connect(busy_timeout_s)
        try:
            self.version_before = migrate(conn, path)
            self._setup(conn, busy_timeout_s)
            self.orphans_marked = self._mark_orphans(conn)
        except BaseException:
            conn.close()
            raise
        # A ":memory:" store's one connection is closed with the read side.
        self._writer = Writer(conn, self._write_lock, on_error, owns_conn=not self.memory)

    def _setup(self, conn: sqlite3.Connection, busy_timeout_s: float) -> None:
        conn.isolation_level = None  # explicit BEGIN / COMMIT from here on
        if not self.memory:
            conn.execute("PRAGMA journal_mode = WAL")
            # NORMAL in WAL: a killed process loses nothing committed; only a
            # power cut may lose the last transactions, never consistency.
            conn.execute("PRAGMA synchronous = NORMAL")
        self._write_lock = threading.Lock()
        if self.memory:
            # One in-memory database: readers share the writer's connection.
            self._read_conn, self._read_lock = conn, self._write_lock
        else:
            self._read_conn = self._connect(busy_timeout_s)
            self._read_conn.isolation_level = None
            self._read_conn.execute("PRAGMA query_only = ON")
            self._read_lock = threading.Lock()
        # The page cache is the one part of a store's memory that grows with the file: a
        # TUI left running fills it as runs are added (the soak, benchmarks/soak.py).  A
        # smaller fixed size puts a bound on it that is reached early; pages beyond it
        # come from the operating system's file cache.
        for each in {conn, self._read_conn}:
            each.execute(f"PRAGMA cache_size = -{PAGE_CACHE_KIB}")

    def _mark_orphans(self, conn: sqlite3.Connection) -> list[str]:
        """Mark this host's runs whose process died (SIGKILL, OOM) as interrupted."""
        try:
            marked = maintenance.mark_orphaned_runs(conn)
        except sqlite3.OperationalError as exc:  # locked by a writer: the next open retries
            log.warning("could not mark runs whose process is gone: %s", exc)
            return []
        if marked:
            log.info("marked %d runs interrupted (their process is gone)", len(marked))
        return marked

    def _connect(self, busy_timeout_s: float) -> sqlite3.Connection:
        conn = sqlite3.connect(str(self.path), timeout=busy_timeout_s, check_same_thread=False)
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_s * 1000)}")
        return conn

    # --- writes (enqueued; never block) -----------------------------------

    def create_run(
        self,
        *,
        name: str | None = None,
        engine_kind: str | None = None,
        node: str | None = None,
        deployment_id: str | None = None,
        profile: Mapping[str, Any] | None = None,
        workload: Mapping[str, Any] | None = None,
        simulated: bool = False,
        software_versions: Mapping[str, Any] | None = None,
        run_id: str | None = None,
        created_at: float | None = None,
    ) -> str:
        run_id = run_id or uuid.uuid4().hex[:12]
        me = owner.this_process()  # the run is "running" while this process lives
        row = (
            run_id,
            name,
            engine_kind,
            node,
            deployment_id,
            dumps(profile or {}),
            dumps(workload or {}),
            dumps(software_versions or {}),
            int(simulated),
            "running",
            time.time() if created_at is None else created_at,
            me.host,
            me.pid,
            me.start,
        )
        self._writer.put_rows(
            "INSERT INTO runs (id, name, engine_kind, node, deployment_id, profile_json, "
            "workload_json, software_json, simulated, status, created_at, owner_host, "
            "owner_pid, owner_start) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [row],
        )
        return run_id

    def add_request(self, record: RequestRecord) -> None:
        self._writer.put_row(INSERT_REQUEST, request_to_row(record))

    def add_requests(self, records: Iterable[RequestRecord]) -> None:
        self._writer.put_rows(INSERT_REQUEST, [request_to_row(r) for r in records])

    def add_level(self, run_id: str, summary: LevelSummary) -> None:
        self._writer.put_rows(INSERT_LEVEL, [level_to_row(run_id, summary)])

    def finish_run(
        self,
        run_id: str,
        status: str = "completed",
        at: float | None = None,
        reason: str | None = None,
    ) -> None:
        """``reason``: why it ended so, in words (a failed or interrupted run says)."""
        self._writer.put_rows(
            "UPDATE runs SET status = ?, finished_at = ?, status_reason = ? WHERE id = ?",
            [(status, time.time() if at is None else at, reason, run_id)],
        )

    def flush(self, timeout_s: float | None = 30.0) -> None:
        """Block until everything queued so far is committed; raises StoreWriteError."""
        self._writer.flush(timeout_s)

    def close(self, timeout_s: float | None = 30.0) -> None:
        try:
            self._writer.close(timeout_s)
        finally:
            with self._read_lock:
                self._read_conn.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def unsaved(self) -> int:
        """Rows held by the writer after a failed transaction (retried)."""
        return self._writer.unsaved

    @property
    def rejected(self) -> list[tuple[str, tuple[Any, ...], str]]:
        """(statement, row, SQLite's reason) for rows this process set aside; the
        file keeps every set-aside row in its ``rejected_rows`` table."""
        return list(self._writer.rejected)

    # --- maintenance (on the writer thread; these wait for it) ------------

    def delete_run(self, run_id: str) -> int:
        full = self._read(queries.resolve_run_id, run_id)
        return int(self._writer.call(lambda c: maintenance.delete_run(c, full)).result())

    def prune_telemetry(self, older_than_s: float) -> maintenance.PruneResult:
        """Retention: delete per-second samples outside runs older than ``older_than_s``."""
        result: maintenance.PruneResult = self._prune(older_than_s).result()
        return result

    def _prune(self, older_than_s: float) -> Future[Any]:
        now = time.time()
        return self._writer.call(lambda c: maintenance.prune_telemetry(c, now - older_than_s, now))

    def _maybe_prune(self) -> None:
        """The configured retention, at most hourly, without waiting for it."""
        now = time.monotonic()
        if self._retention_s is None or now < self._next_prune:
            return
        self._next_prune = now + RETENTION_CHECK_S
        self._prune(self._retention_s).add_done_callback(_log_failure)

    def vacuum(self) -> tuple[int, int]:
        """VACUUM the file; returns (bytes before, bytes after)."""
        sizes: tuple[int, int] = self._writer.call(maintenance.vacuum).result()
        return sizes

    # --- reads (read connection; from a loop, call in a worker thread) -----

    def _read(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        with self._read_lock:
            return fn(self._read_conn, *args, **kwargs)

    def list_runs(self, **filters: Any) -> list[RunInfo]:
        """Filters: status, engine_kind, node, name_contains, limit."""
        result: list[RunInfo] = self._read(queries.list_runs, **filters)
        return result

    def get_run(self, run_id: str) -> RunInfo:
        result: RunInfo = self._read(queries.get_run, run_id)
        return result

    def levels(self, run_id: str) -> list[LevelRow]:
        result: list[LevelRow] = self._read(queries.levels, run_id)
        return result

    def engine_gpus(self, run: RunInfo) -> list[int] | None:
        """The GPUs the run's engine used (its deployment row), None where none names them."""
        result: list[int] | None = self._read(queries.deployment_gpus, run.deployment_id)
        return result

    def compare(self, run_ids: Sequence[str]) -> Comparison:
        cache_rows: list[tuple[Any, ...]] = []
        result: Comparison = self._read(queries.compare, run_ids, cache_out=cache_rows)
        if cache_rows and not self._writer.closed:
            self._writer.put_rows(energy.CACHE_SQL, cache_rows)
        return result

    def regressions(self, base_run: str, new_run: str, threshold: float = 0.05) -> list[Regression]:
        result: list[Regression] = self._read(queries.regressions, base_run, new_run, threshold)
        return result

    def iter_requests(self, run_id: str) -> Iterator[RequestRecord]:
        """Requests of a run, in order; reads in batches, holding the read
        connection only while a batch is fetched."""
        full = self._read(queries.resolve_run_id, run_id)
        last = (-1, -1)
        while True:
            with self._read_lock:
                rows = list(queries.requests_after(self._read_conn, full, last, 5000))
            if not rows:
                return
            yield from rows
            last = (rows[-1].level_index, rows[-1].request_index)

    def request_count(self, run_id: str) -> int:
        full = self._read(queries.resolve_run_id, run_id)
        row = self._read(
            lambda c: c.execute(
                "SELECT count(*) FROM requests WHERE run_id = ?", (full,)
            ).fetchone()
        )
        return int(row[0])


def _log_failure(future: Future[Any]) -> None:
    exc = future.exception()
    if exc is not None:
        log.error("telemetry retention failed: %s", exc)


def open_store(path: Path | str | None = None, **options: Any) -> Store:
    """Open (creating and migrating) the store at ``path`` or the default path.

    Raises ``StoreVersionError`` for a file from a newer infer-top (left
    unchanged) and ``StoreError`` for a file that is not an infer-top store.
    """
    target = default_db_path() if path is None else path
    try:
        return Store(target, **options)
    except sqlite3.Error as exc:
        raise StoreError(
            f"cannot open the store at {target}: {exc}; check the path and its permissions, "
            "or point --db / INFER_TOP_DB elsewhere"
        ) from exc
