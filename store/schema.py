"""The store's schema, as numbered migrations (sqlite-utils ``Migrations``).

A migration, once released, never changes: a DB file made by an older
infer-top is upgraded by running only the migrations it lacks.  The telemetry
tables' later columns are the exception: they derive from the frame
declarations, and ``store.samples.add_declared_columns`` adds any a file lacks
after the numbered migrations (additive, so no version number is spent on it).  Each one also
sets ``PRAGMA user_version`` to its number inside its own transaction, so the
version of a file can be read without trusting any table in it, and a file
from a newer infer-top is recognised before anything is written to it.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from sqlite_utils import Database
from sqlite_utils.migrations import Migrations

from store.errors import StoreError, StoreVersionError
from store.samples import add_declared_columns

SCHEMA_VERSION = 6
"""The newest schema this infer-top writes and reads."""

APPLICATION_ID = 0x69746F70  # "itop": marks a file as an infer-top store
MIGRATION_SET = "infer-top"
PAGE_SIZE = 16384

MIGRATIONS = Migrations(MIGRATION_SET)


def _set_version(db: Database, version: int) -> None:
    db.execute(f"PRAGMA user_version = {int(version)}")
    db.execute(f"PRAGMA application_id = {APPLICATION_ID}")


@MIGRATIONS(name="0001_initial")
def _v1_initial(db: Database) -> None:
    db.table("nodes").create(
        {
            "name": str,
            "platform": str,
            "address": str,
            "gpus_json": str,
            "unified_memory": int,
            "first_seen": float,
            "last_seen": float,
        },
        pk="name",
    )
    db.table("deployments").create(
        {
            "id": str,
            "node": str,
            "engine_kind": str,
            "image": str,
            "launch_config_json": str,
            "gpus_json": str,
            "started_at": float,
            "stopped_at": float,
            "simulated": int,
        },
        pk="id",
    )
    db.table("deployments").create_index(["node", "started_at"])
    db.table("runs").create(
        {
            "id": str,
            "name": str,
            "engine_kind": str,
            "node": str,
            "deployment_id": str,
            "profile_json": str,
            "workload_json": str,
            "software_json": str,
            "simulated": int,
            "status": str,
            "created_at": float,
            "finished_at": float,
        },
        pk="id",
        not_null={"status", "created_at"},
    )
    db.table("runs").create_index(["created_at"])
    db.table("levels").create(
        {
            "run_id": str,
            "level_index": int,
            "concurrency": int,
            "request_rate": float,
            "started_at": float,
            "ended_at": float,
            "completed": int,
            "failed": int,
            "incomplete": int,
            "output_tok_s": float,
            "total_tok_s": float,
            "request_s": float,
            "achieved_rate": float,
            "goodput_req_s": float,
            # Flat copies of the percentiles most queries sort or filter on;
            # percentiles_json keeps every Percentiles exactly.
            "ttft_p50_s": float,
            "ttft_p99_s": float,
            "tpot_p50_s": float,
            "percentiles_json": str,
            "failures_json": str,
            "total_output_tokens": int,
            "total_prompt_tokens": int,
            "usage_mismatches": int,
            "energy_j": float,
            "mean_gpu_util_pct": float,
            "mean_power_w": float,
        },
        pk=("run_id", "level_index"),
    )
    db.table("requests").create(
        {
            "id": int,
            "run_id": str,
            "level_index": int,
            "request_index": int,
            "scheduled_at": float,
            "sent_at": float,
            "first_token_at": float,
            "end_at": float,
            "prompt_tokens": int,
            "output_tokens": int,
            "usage_completion_tokens": int,
            "counted_output_tokens": int,
            "chunk_count": int,
            "error_kind": str,
            "http_status": int,
            "error_message": str,
            "incomplete": int,
        },
        pk="id",
    )
    db.table("requests").create_index(["run_id", "level_index", "request_index"], unique=True)
    db.table("gpu_samples").create(
        {
            "node": str,
            "ts": float,
            "gpu_index": int,
            "util_pct": float,
            "mem_used_bytes": int,
            "power_w": float,
            "energy_j": float,
            "temp_c": float,
            "sm_clock_mhz": float,
        }
    )
    db.table("gpu_samples").create_index(["node", "gpu_index", "ts"])
    db.table("gpu_samples").create_index(["ts"])
    db.table("engine_samples").create(
        {
            "node": str,
            "ts": float,
            "engine_id": str,
            "engine_kind": str,
            "kv_cache_usage": float,
            "requests_running": float,
            "requests_waiting": float,
            "prompt_tok_s": float,
            "generation_tok_s": float,
            "ttft_p50_s": float,
            "itl_p50_s": float,
        }
    )
    db.table("engine_samples").create_index(["node", "engine_id", "ts"])
    db.table("engine_samples").create_index(["ts"])
    db.table("events").create(
        {
            "id": int,
            "ts": float,
            "node": str,
            "kind": str,
            "deployment_id": str,
            "message": str,
        },
        pk="id",
    )
    db.table("events").create_index(["ts"])
    _set_version(db, 1)


@MIGRATIONS(name="0002_itl_and_history")
def _v2_itl_and_history(db: Database) -> None:
    # v1 dropped each request's inter-token gaps and tokens per chunk; keep
    # them packed in one blob (store.models.pack_chunks) so a million
    # requests stay cheap to insert.
    db.execute("ALTER TABLE requests ADD COLUMN chunks_blob BLOB")
    # Fields the records gained after this schema (the contracts grow
    # additively), as JSON, so a newer load generator's values survive.
    db.execute("ALTER TABLE requests ADD COLUMN extra_json TEXT")
    db.execute("ALTER TABLE levels ADD COLUMN extra_json TEXT")
    # Down-sampled telemetry kept after the per-second samples outside runs
    # are pruned: one row per node, GPU and minute.
    db.table("gpu_history").create(
        {
            "node": str,
            "gpu_index": int,
            "bucket_ts": float,
            "samples": int,
            "util_pct_mean": float,
            "power_w_mean": float,
            "energy_j_last": float,
            "mem_used_bytes_max": int,
            "temp_c_max": float,
        },
        pk=("node", "gpu_index", "bucket_ts"),
    )
    db.table("gpu_history").create_index(["bucket_ts"])
    # Comparisons read every GPU of a node over a level's window, and keep
    # the result per settled level (store.energy).
    db.table("gpu_samples").create_index(["node", "ts"])
    db.table("level_energy").create(
        {
            "run_id": str,
            "level_index": int,
            "node": str,
            "started_at": float,
            "ended_at": float,
            "gpus_key": str,
            "samples": int,
            "mean_util_pct": float,
            "mean_power_w": float,
            "energy_j": float,
        },
        pk=("run_id", "level_index"),
    )
    db.table("level_energy").create_index(["node", "ended_at"])
    _set_version(db, 2)


@MIGRATIONS(name="0003_rejected_rows")
def _v3_rejected_rows(db: Database) -> None:
    # Rows the writer could never write (a value SQLite refuses, an integer
    # past 64 bits), kept as JSON with the reason instead of being retried
    # forever or dropped (store.writer).
    db.table("rejected_rows").create(
        {"id": int, "ts": float, "statement": str, "row_json": str, "error": str},
        pk="id",
        not_null={"ts", "statement", "row_json", "error"},
    )
    _set_version(db, 3)


@MIGRATIONS(name="0004_run_owner")
def _v4_run_owner(db: Database) -> None:
    # The process that writes a run (host, pid, start identity: store.owner),
    # so a run whose process died is marked interrupted, not left running.
    db.execute("ALTER TABLE runs ADD COLUMN owner_host TEXT")
    db.execute("ALTER TABLE runs ADD COLUMN owner_pid INTEGER")
    db.execute("ALTER TABLE runs ADD COLUMN owner_start TEXT")
    _set_version(db, 4)


@MIGRATIONS(name="0005_run_status_reason")
def _v5_run_status_reason(db: Database) -> None:
    # Why a run ended as it did, in words ("all 32 requests failed: http_status 32",
    # "stopped by SIGTERM"), for `runs list` and the TUI (store.recorder).
    db.execute("ALTER TABLE runs ADD COLUMN status_reason TEXT")
    _set_version(db, 5)


@MIGRATIONS(name="0006_alerts")
def _v6_alerts(db: Database) -> None:
    # Every alert raised (alerts.Alert, one row each, updated when it clears or is
    # acknowledged), linked to the load run active where it was raised (store.alerts).
    db.table("alerts").create(
        {
            "id": str,
            "rule": str,
            "title": str,
            "severity": str,
            "node": str,
            "gpu_index": int,
            "engine_id": str,
            "value": float,
            "message": str,
            "raised_at": float,
            "cleared_at": float,
            "acked_at": float,
            "run_id": str,
        },
        pk="id",
        not_null={"rule", "severity", "node", "raised_at"},
    )
    db.table("alerts").create_index(["raised_at"])
    db.table("alerts").create_index(["run_id"])
    _set_version(db, 6)


def file_version(conn: sqlite3.Connection) -> int:
    return int(conn.execute("PRAGMA user_version").fetchone()[0])


def check_version(conn: sqlite3.Connection, where: Path | str) -> int:
    """Refuse a file this infer-top cannot safely write; reads only."""
    try:
        version = file_version(conn)
        app_id = int(conn.execute("PRAGMA application_id").fetchone()[0])
        tables = conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
    except sqlite3.DatabaseError as exc:
        raise StoreError(
            f"{where} is not a readable SQLite database ({exc}); "
            "point --db / INFER_TOP_DB at an infer-top store or a new file"
        ) from exc
    if tables and app_id != APPLICATION_ID:
        raise StoreError(
            f"{where} is a SQLite database of another program (application_id {app_id:#x}); "
            "infer-top will not write into it: point --db / INFER_TOP_DB at another file"
        )
    if version > SCHEMA_VERSION:
        raise StoreVersionError(
            f"{where} has store schema version {version}, but this infer-top supports "
            f"versions up to {SCHEMA_VERSION}: it was written by a newer infer-top. "
            "Upgrade infer-top (pip install -U infer-top), or use another file with --db / "
            "INFER_TOP_DB. The file was left unchanged.",
            file_version=version,
            supported_version=SCHEMA_VERSION,
        )
    return version


def migrate(conn: sqlite3.Connection, where: Path | str) -> int:
    """Bring the file to ``SCHEMA_VERSION``; returns the version it had."""
    before = check_version(conn, where)
    if conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0] == 0:
        # Only a new file can take it: 16 KiB pages make the ~700-byte
        # request rows a quarter cheaper to insert than the 4 KiB default.
        conn.execute(f"PRAGMA page_size = {PAGE_SIZE}")
    db = Database(conn, execute_plugins=False)
    names = {m.name for m in MIGRATIONS.applied(db)}
    known = {m.name for m in MIGRATIONS._migrations}
    unknown = names - known
    if unknown:
        raise StoreVersionError(
            f"{where} has migrations this infer-top does not know ({', '.join(sorted(unknown))}): "
            "it was written by a newer infer-top. Upgrade infer-top or use another file.",
            file_version=before,
            supported_version=SCHEMA_VERSION,
        )
    MIGRATIONS.apply(db)
    add_declared_columns(db)
    conn.commit()
    return before
