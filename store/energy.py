"""GPU utilisation, power and energy over a load level's window.

Computed from the stored per-second GPU samples, and cached per level once
the window has settled (no sample is expected for it any more), so a
comparison of many runs reads one small row per level instead of scanning
every sample again.  A cache row is written only if the window still holds
the samples it was computed from, and dropped when a late sample lands in
its window.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from runs.records import LevelSummary

SETTLE_S = 120.0
"""A window that ended this long ago gets no new samples (frames are live, 1 Hz)."""

_WINDOW = (
    "FROM gpu_samples INDEXED BY idx_gpu_samples_node_ts WHERE node = ? AND ts BETWEEN ? AND ?"
)

CACHE_SQL = (
    "INSERT OR REPLACE INTO level_energy (run_id, level_index, node, started_at, ended_at, "
    "gpus_key, samples, mean_util_pct, mean_power_w, energy_j) "
    "SELECT ?, ?, ?, ?, ?, ?, ?, ?, ?, ? "
    f"WHERE (SELECT count(*) {_WINDOW}) = ?"
)
"""Parameters: the ten values, then node, start, end and the sample count again."""

INVALIDATE_SQL = "DELETE FROM level_energy WHERE node = ? AND ended_at >= ? AND started_at <= ?"


def window_energy(
    conn: sqlite3.Connection, node: str, start: float, end: float, gpus: list[int] | None = None
) -> tuple[float | None, float | None, float | None, int]:
    """(mean util %, mean power W summed over GPUs, energy J, samples) in a window.

    Energy is each GPU's energy-counter rise over the window (the counter is
    monotonic, so max - min of the samples); a GPU without a counter
    contributes its mean power x the window's length.  One indexed query.
    """
    only = ""
    params: list[Any] = [node, start, end]
    if gpus:
        only = f" AND gpu_index IN ({', '.join('?' * len(gpus))})"
        params += gpus
    rows = conn.execute(
        "SELECT avg(util_pct), avg(power_w), count(energy_j), min(energy_j), max(energy_j), "
        f"count(*) {_WINDOW}{only} GROUP BY gpu_index",
        params,
    ).fetchall()
    utils = [r[0] for r in rows if r[0] is not None]
    powers = [r[1] for r in rows if r[1] is not None]
    energy: float | None = None
    for _util, power, e_count, e_min, e_max, _n in rows:
        if e_count >= 2:
            energy = (energy or 0.0) + (e_max - e_min)
        elif power is not None:
            energy = (energy or 0.0) + power * (end - start)
    return (
        sum(utils) / len(utils) if utils else None,
        sum(powers) if powers else None,
        energy,
        sum(r[5] for r in rows),
    )


def window_peaks(
    conn: sqlite3.Connection,
    node: str,
    engine_id: str | None,
    start: float,
    end: float,
    gpus: list[int] | None = None,
) -> tuple[int | None, float | None]:
    """(GPU memory in use at its peak, each GPU's peak summed; the engine's KV-cache usage
    at its peak) in a window. Not cached with the energy: two indexed reads of one
    window's samples, and a cache row of an older file would lack them."""
    only = ""
    params: list[Any] = [node, start, end]
    if gpus:
        only = f" AND gpu_index IN ({', '.join('?' * len(gpus))})"
        params += gpus
    peaks = [
        r[0]
        for r in conn.execute(
            f"SELECT max(mem_used_bytes) {_WINDOW}{only} GROUP BY gpu_index", params
        )
        if r[0] is not None
    ]
    kv = None
    if engine_id is not None:
        kv = conn.execute(
            "SELECT max(kv_cache_usage) FROM engine_samples INDEXED BY "
            "idx_engine_samples_node_engine_id_ts WHERE node = ? AND engine_id = ? "
            "AND ts BETWEEN ? AND ?",
            (node, engine_id, start, end),
        ).fetchone()[0]
    return (int(sum(peaks)) if peaks else None), kv


def cached(conn: sqlite3.Connection, run_id: str) -> dict[int, tuple[Any, ...]]:
    """level_index -> (gpus_key, mean util, mean power, energy) for a run's settled levels."""
    return {
        r[0]: r[1:]
        for r in conn.execute(
            "SELECT level_index, gpus_key, mean_util_pct, mean_power_w, energy_j "
            "FROM level_energy WHERE run_id = ?",
            (run_id,),
        )
    }


def level_window(
    conn: sqlite3.Connection,
    run_id: str,
    node: str,
    s: LevelSummary,
    gpus: list[int] | None,
    cache: dict[int, tuple[Any, ...]],
    now: float,
    cache_out: list[tuple[Any, ...]] | None,
) -> tuple[float | None, float | None, float | None]:
    gpus_key = json.dumps(gpus) if gpus else ""
    hit = cache.get(s.level_index)
    if hit is not None and hit[0] == gpus_key:
        return hit[1], hit[2], hit[3]
    util, power, energy, samples = window_energy(conn, node, s.started_at, s.ended_at, gpus)
    if cache_out is not None and s.ended_at < now - SETTLE_S:
        cache_out.append(
            (run_id, s.level_index, node, s.started_at, s.ended_at, gpus_key, samples, util,
             power, energy, node, s.started_at, s.ended_at, samples)
        )  # fmt: skip
    return util, power, energy
