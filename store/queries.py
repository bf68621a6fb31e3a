"""Reads: runs, levels, requests, and the comparison across runs.

Every function takes a connection and only reads; the ``Store`` decides which
connection (its read connection, never the writer's) and on which thread.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Sequence
from typing import Any

from runs.records import LevelSummary, RequestRecord, workload_gaps
from store import energy
from store.errors import RunNotFoundError, StoreError
from store.labels import comparison_labels, differences
from store.models import (
    LEVEL_COLUMNS,
    REQUEST_COLUMNS,
    Comparison,
    ComparisonRow,
    LevelRow,
    Regression,
    RunInfo,
    row_to_level,
    row_to_request,
)

# Requests are counted from the stored rows: a run cut short (Ctrl-C, SIGKILL)
# has requests but no summary of its last level.
_RUN_SELECT = """
SELECT r.id, r.name, r.engine_kind, r.node, r.deployment_id, r.profile_json, r.workload_json,
       r.software_json, r.simulated, r.status, r.created_at, r.finished_at,
       (SELECT count(*) FROM levels l WHERE l.run_id = r.id),
       (SELECT count(*) FROM requests q WHERE q.run_id = r.id),
       r.status_reason
FROM runs r
"""


def _run_from_row(row: tuple[Any, ...]) -> RunInfo:
    return RunInfo(
        run_id=row[0],
        name=row[1],
        engine_kind=row[2],
        node=row[3],
        deployment_id=row[4],
        profile=json.loads(row[5] or "{}"),
        workload=json.loads(row[6] or "{}"),
        software_versions=json.loads(row[7] or "{}"),
        simulated=bool(row[8]),
        status=row[9],
        created_at=row[10],
        finished_at=row[11],
        level_count=row[12],
        request_count=row[13],
        status_reason=row[14],
    )


def resolve_run_id(conn: sqlite3.Connection, run_id: str) -> str:
    """An exact id, or a prefix that names exactly one run."""
    if conn.execute("SELECT 1 FROM runs WHERE id = ?", (run_id,)).fetchone():
        return run_id
    escaped = run_id.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    found = tuple(
        r[0]
        for r in conn.execute(
            "SELECT id FROM runs WHERE id LIKE ? ESCAPE '\\' ORDER BY created_at LIMIT 6",
            (escaped + "%",),
        )
    )
    if len(found) == 1:
        return str(found[0])
    raise RunNotFoundError(run_id, found)


def list_runs(
    conn: sqlite3.Connection,
    *,
    status: str | None = None,
    engine_kind: str | None = None,
    node: str | None = None,
    name_contains: str | None = None,
    limit: int | None = None,
) -> list[RunInfo]:
    where: list[str] = []
    params: list[Any] = []
    for column, value in (("r.status", status), ("r.engine_kind", engine_kind), ("r.node", node)):
        if value is not None:
            where.append(f"{column} = ?")
            params.append(value)
    if name_contains:
        where.append("instr(lower(coalesce(r.name, '')), lower(?)) > 0")
        params.append(name_contains)
    sql = _RUN_SELECT + (f"WHERE {' AND '.join(where)} " if where else "")
    sql += "ORDER BY r.created_at DESC"
    if limit is not None:
        sql += " LIMIT ?"
        params.append(int(limit))
    return [_run_from_row(r) for r in conn.execute(sql, params)]


def get_run(conn: sqlite3.Connection, run_id: str) -> RunInfo:
    full = resolve_run_id(conn, run_id)
    row = conn.execute(_RUN_SELECT + "WHERE r.id = ?", (full,)).fetchone()
    return _run_from_row(row)


def levels(conn: sqlite3.Connection, run_id: str) -> list[LevelRow]:
    full = resolve_run_id(conn, run_id)
    rows = conn.execute(
        f"SELECT {LEVEL_COLUMNS} FROM levels WHERE run_id = ? ORDER BY level_index", (full,)
    )
    return [row_to_level(r) for r in rows]


def requests_after(
    conn: sqlite3.Connection, run_id: str, after: tuple[int, int], limit: int
) -> list[RequestRecord]:
    """Up to ``limit`` requests of a run following (level, request) ``after``:
    keyset pages, so a reader never holds a cursor open between pages."""
    rows = conn.execute(
        f"SELECT {REQUEST_COLUMNS} FROM requests WHERE run_id = ? "
        "AND (level_index, request_index) > (?, ?) ORDER BY level_index, request_index LIMIT ?",
        (run_id, after[0], after[1], limit),
    )
    return [row_to_request(r) for r in rows]


def deployment_gpus(conn: sqlite3.Connection, deployment_id: str | None) -> list[int] | None:
    if deployment_id is None:
        return None
    row = conn.execute(
        "SELECT gpus_json FROM deployments WHERE id = ?", (deployment_id,)
    ).fetchone()
    if row is None or not row[0]:
        return None
    gpus = json.loads(row[0])
    return [int(g) for g in gpus] if gpus else None


def compare(
    conn: sqlite3.Connection,
    run_ids: Sequence[str],
    *,
    cache_out: list[tuple[Any, ...]] | None = None,
) -> Comparison:
    """Runs x levels with their metrics; GPU figures a level lacks come from
    the stored telemetry over its window (cached per level once settled:
    rows for ``energy.CACHE_SQL`` are appended to ``cache_out``)."""
    runs = [get_run(conn, r) for r in run_ids]
    labels = comparison_labels(runs)
    rows: list[ComparisonRow] = []
    now = time.time()
    summaries: dict[str, list[LevelSummary]] = {}
    for run in runs:
        gpus = deployment_gpus(conn, run.deployment_id)
        cached = energy.cached(conn, run.run_id)
        for lr in levels(conn, run.run_id):
            summaries.setdefault(run.run_id, []).append(lr.summary)
            s = lr.summary
            util, power, joules = s.mean_gpu_util_pct, s.mean_power_w, s.energy_j
            source = "loadgen" if joules is not None else None
            mem_peak, kv_peak = (
                energy.window_peaks(
                    conn, run.node, run.deployment_id, s.started_at, s.ended_at, gpus
                )
                if run.node
                else (None, None)
            )
            if run.node and (joules is None or util is None or power is None):
                t_util, t_power, t_energy = energy.level_window(
                    conn, run.run_id, run.node, s, gpus, cached, now, cache_out
                )
                util = util if util is not None else t_util
                power = power if power is not None else t_power
                if joules is None and t_energy is not None:
                    joules, source = t_energy, "telemetry"
            rows.append(
                ComparisonRow(
                    run_id=run.run_id,
                    label=labels[run.run_id],
                    engine_kind=run.engine_kind,
                    node=run.node,
                    simulated=run.simulated,
                    level_index=s.level_index,
                    concurrency=s.concurrency,
                    request_rate=s.request_rate,
                    started_at=s.started_at,
                    ended_at=s.ended_at,
                    output_tok_s=s.output_tok_s,
                    request_s=s.request_s,
                    ttft_p50_s=s.ttft_s.p50,
                    ttft_p99_s=s.ttft_s.p99,
                    tpot_p50_s=s.tpot_s.p50,
                    failure_rate=s.failure_rate,
                    total_output_tokens=s.total_output_tokens,
                    mean_gpu_util_pct=util,
                    mean_power_w=power,
                    energy_j=joules,
                    energy_source=source,
                    failures_by_kind=dict(s.failures_by_kind),
                    peak_gpu_mem_bytes=mem_peak,
                    kv_cache_peak=kv_peak,
                )
            )
    warnings = (*differences(runs), *workload_gaps(summaries))
    return Comparison(runs=tuple(runs), rows=tuple(rows), warnings=warnings, labels=labels)


# (metric, higher is better)
REGRESSION_METRICS: tuple[tuple[str, bool], ...] = (
    ("output_tok_s", True),
    ("request_s", True),
    ("ttft_p50_s", False),
    ("ttft_p99_s", False),
    ("tpot_p50_s", False),
    ("failure_rate", False),
    ("tok_per_j", True),
)


def measured_profile(profile: dict[str, Any]) -> dict[str, Any]:
    """A stored profile without who started the run, where from and at which URL
    (``runs.setup``): the same load at the same model is one configuration from the TUI
    or the CLI, directly or through the agent's proxy.  The engine's start options are
    configuration; its KV-capacity check is a measurement of that start."""
    what = {k: v for k, v in profile.items() if k not in ("origin", "placement", "engine")}
    engine = profile.get("engine")
    options = engine.get("options") if isinstance(engine, dict) else None
    if options:
        what["engine_options"] = options
    target = what.get("target")
    if isinstance(target, dict):
        what["target"] = {k: v for k, v in target.items() if k != "url"}
    return what


def measured_workload(workload: dict[str, Any]) -> dict[str, Any]:
    """What a run's workload asks: its seed and salt only choose the words, and how the
    prompts were sized is how it was sent (the engine-counted tokens of each level show
    what was; a comparison warns when they differ: ``runs.records.workload_gaps``). A
    dataset is the file's name and SHA-256 (``dataset_id``), not where it lay nor how it
    was read or split."""
    how = ("seed", "salt", "sizing", "dataset_read", "on_bad_line", "dataset_part", "dataset_parts")
    what = {k: v for k, v in workload.items() if k not in how}
    if "dataset_id" in what:
        what.pop("dataset", None)
    return what


def config_differences(a: RunInfo, b: RunInfo) -> list[str]:
    diffs = []
    if a.engine_kind != b.engine_kind:
        diffs.append("engine_kind")
    if measured_profile(a.profile) != measured_profile(b.profile):
        diffs.append("profile")
    if measured_workload(a.workload) != measured_workload(b.workload):
        diffs.append("workload")
    return diffs


def regressions(
    conn: sqlite3.Connection,
    base_run: str,
    new_run: str,
    threshold: float = 0.05,
) -> list[Regression]:
    """Metrics at matching load levels that got worse by more than ``threshold``.

    Throughput, latency and energy compare relatively; failure rate compares
    in absolute points (0.05 = five percentage points), since its base is
    often zero.
    """
    comparison = compare(conn, [base_run, new_run])
    base, new = comparison.runs
    diffs = config_differences(base, new)
    if diffs:
        raise StoreError(
            f"runs {base.run_id} and {new.run_id} differ in {', '.join(diffs)}, so a change "
            "between them is not a regression of one configuration; regressions compare two "
            "runs of the same engine, profile and workload"
        )
    by_key = {r.level_key: r for r in comparison.rows if r.run_id == base.run_id}
    found: list[Regression] = []
    for row in comparison.rows:
        if row.run_id != new.run_id or row.level_key not in by_key:
            continue
        old = by_key[row.level_key]
        for metric, higher_better in REGRESSION_METRICS:
            a, b = getattr(old, metric), getattr(row, metric)
            if a is None or b is None:
                continue
            if metric == "failure_rate":
                change = b - a
                worse = change > threshold
            else:
                if a == 0:
                    continue
                change = b / a - 1.0
                worse = change < -threshold if higher_better else change > threshold
            if worse:
                found.append(Regression(row.concurrency, row.request_rate, metric, a, b, change))
    return found
