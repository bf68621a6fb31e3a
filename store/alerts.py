"""Alerts in the store: one row per ``alerts.Alert``, written through the one writer
(a raise inserts it, a clear or an acknowledgement replaces it), read back for
``infer-top alerts``, the TUI's past alerts and a run's report."""

from __future__ import annotations

import dataclasses
import sqlite3
from collections.abc import Callable
from typing import Any

from alerts import Alert, Severity
from store.writer import Writer

COLUMNS = tuple(f.name for f in dataclasses.fields(Alert))
UPSERT = (
    f"INSERT OR REPLACE INTO alerts ({', '.join(COLUMNS)}) "
    f"VALUES ({', '.join('?' for _ in COLUMNS)})"
)


def alert_row(alert: Alert) -> tuple[Any, ...]:
    return tuple(
        str(value) if isinstance(value, Severity) else value
        for value in (getattr(alert, name) for name in COLUMNS)
    )


def row_alert(row: sqlite3.Row | tuple[Any, ...]) -> Alert:
    values = dict(zip(COLUMNS, row, strict=True))
    values["severity"] = Severity(values["severity"])
    return Alert(**values)


def query_alerts(
    conn: sqlite3.Connection,
    *,
    since: float | None = None,
    run_id: str | None = None,
    limit: int = 1000,
) -> list[Alert]:
    """Newest first: alerts raised since ``since`` or still active, or those of a run."""
    where: list[str] = []
    args: list[object] = []
    if since is not None:
        where.append("(raised_at >= ? OR cleared_at IS NULL OR cleared_at >= ?)")
        args += [since, since]
    if run_id is not None:
        where.append("run_id = ?")
        args.append(run_id)
    sql = f"SELECT {', '.join(COLUMNS)} FROM alerts"
    if where:
        sql += " WHERE " + " AND ".join(where)
    sql += " ORDER BY raised_at DESC LIMIT ?"
    return [row_alert(r) for r in conn.execute(sql, (*args, limit))]


class AlertsMixin:
    _writer: Writer
    _read: Callable[..., Any]

    def save_alert(self, alert: Alert) -> None:
        """Insert or replace the alert's row (enqueued; never blocks)."""
        self._writer.put_rows(UPSERT, [alert_row(alert)])

    def list_alerts(
        self, *, since: float | None = None, run_id: str | None = None, limit: int = 1000
    ) -> list[Alert]:
        result: list[Alert] = self._read(query_alerts, since=since, run_id=run_id, limit=limit)
        return result
