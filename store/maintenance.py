"""Writes that reshape stored data: delete a run, orphaned runs, retention, VACUUM.

They run on the writer's connection: through ``Writer.call``, after every
row queued before them, so they never race the hot insert path (orphaned runs
are marked when the store opens, before its writer starts).
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

from store import owner


@dataclass(frozen=True, slots=True)
class PruneResult:
    gpu_samples_deleted: int
    engine_samples_deleted: int


def delete_run(conn: sqlite3.Connection, run_id: str) -> int:
    """Delete a run with its levels and requests; returns the requests deleted."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        n = conn.execute("DELETE FROM requests WHERE run_id = ?", (run_id,)).rowcount
        conn.execute("DELETE FROM levels WHERE run_id = ?", (run_id,))
        conn.execute("DELETE FROM level_energy WHERE run_id = ?", (run_id,))
        conn.execute("DELETE FROM runs WHERE id = ?", (run_id,))
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return n


def mark_orphaned_runs(conn: sqlite3.Connection) -> list[str]:
    """Runs still ``running`` whose process is gone become ``interrupted``,
    finished when their last stored request ended; returns their ids."""
    running = conn.execute(
        "SELECT id, owner_host, owner_pid, owner_start FROM runs "
        "WHERE status = 'running' AND owner_pid IS NOT NULL"
    ).fetchall()
    gone = [(run_id,) for run_id, *who in running if owner.is_gone(*who)]
    if not gone:
        return []
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.executemany(
            "UPDATE runs SET status = 'interrupted', status_reason = 'its process ended "
            "without finishing it (killed?)', finished_at = coalesce("
            "(SELECT max(coalesce(end_at, sent_at)) FROM requests WHERE run_id = runs.id), "
            "created_at) WHERE id = ? AND status = 'running'",
            gone,
        )
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return [run_id for (run_id,) in gone]


# A sample is "inside a run" when its node ran a run then; those samples are
# kept in full because comparisons compute energy from them.
_OUTSIDE_RUNS = """
    ts < :cutoff AND NOT EXISTS (
        SELECT 1 FROM runs r WHERE r.node = {t}.node
          AND {t}.ts >= r.created_at AND {t}.ts <= coalesce(r.finished_at, :now))
"""


def prune_telemetry(conn: sqlite3.Connection, cutoff: float, now: float) -> PruneResult:
    """Delete the per-second samples older than ``cutoff`` taken outside runs."""
    params = {"cutoff": cutoff, "now": now}
    conn.execute("BEGIN IMMEDIATE")
    try:
        gpu_deleted = conn.execute(
            "DELETE FROM gpu_samples WHERE " + _OUTSIDE_RUNS.format(t="gpu_samples"), params
        ).rowcount
        engine_deleted = conn.execute(
            "DELETE FROM engine_samples WHERE " + _OUTSIDE_RUNS.format(t="engine_samples"),
            params,
        ).rowcount
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return PruneResult(gpu_deleted, engine_deleted)


def vacuum(conn: sqlite3.Connection) -> tuple[int, int]:
    """VACUUM; returns the file's size in bytes before and after."""

    def size() -> int:
        page_count = conn.execute("PRAGMA page_count").fetchone()[0]
        page_size = conn.execute("PRAGMA page_size").fetchone()[0]
        return int(page_count) * int(page_size)

    before = size()
    conn.execute("VACUUM")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return before, size()
