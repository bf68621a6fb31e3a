"""``infer-top runs list`` / ``runs show`` for scripts: JSON and TSV, and a console that
never cuts a line when the output is piped.

Rich sizes its tables to the terminal, and to 80 columns when stdout is not one, so
``infer-top runs list | grep`` used to lose every column past the 80th ("…"). Piped,
the table is as wide as its content; ``--json`` and ``--tsv`` give fields a script can
read without parsing a table.
"""

from __future__ import annotations

import datetime as dt
import json
import sys
from collections.abc import Iterable, Sequence
from dataclasses import asdict
from typing import Any

from rich.console import Console

from alerts import Alert
from store.export import CSV_FIELDS, row_dict
from store.models import Comparison, RunInfo

UNCUT_WIDTH_CELLS = 100_000
"""A width no table row reaches: piped output is as wide as its content."""

LIST_FIELDS = (
    "run_id",
    "name",
    "engine_kind",
    "node",
    "status",
    "status_reason",
    "simulated",
    "level_count",
    "request_count",
    "created_at",
    "finished_at",
)
"""The columns of ``runs list --tsv``, in order (times as ISO 8601, local time)."""


def stdout_console() -> Console:
    """The terminal's width on a terminal; uncut when piped or redirected."""
    if sys.stdout.isatty():
        return Console()
    return Console(width=UNCUT_WIDTH_CELLS)


def _iso(ts: float | None) -> str:
    if ts is None:
        return ""
    return dt.datetime.fromtimestamp(ts).astimezone().isoformat(timespec="seconds")


def _cell(value: object) -> str:
    """One TSV field: empty for unknown, and no tab or newline that would split a row."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict | list):
        value = json.dumps(value, sort_keys=True)
    return " ".join(str(value).split())


def tsv(header: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    lines = ["\t".join(header)]
    lines += ["\t".join(_cell(v) for v in row) for row in rows]
    return "\n".join(lines) + "\n"


def runs_tsv(runs: Sequence[RunInfo]) -> str:
    def fields(run: RunInfo) -> list[object]:
        values: dict[str, object] = {f: getattr(run, f) for f in LIST_FIELDS}
        values["created_at"] = _iso(run.created_at)
        values["finished_at"] = _iso(run.finished_at)
        return [values[f] for f in LIST_FIELDS]

    return tsv(LIST_FIELDS, (fields(r) for r in runs))


def runs_json(runs: Sequence[RunInfo]) -> str:
    return json.dumps([asdict(r) for r in runs], indent=2, default=str) + "\n"


def levels_tsv(comparison: Comparison) -> str:
    """``runs show --tsv``: one row per load level, the export's CSV columns."""
    return tsv(CSV_FIELDS, ([row_dict(r)[f] for f in CSV_FIELDS] for r in comparison.rows))


def run_json(
    run: RunInfo, comparison: Comparison, alerts: Sequence[Alert], warnings: Sequence[str]
) -> str:
    """``runs show --json``: the run, every level's metrics, its alerts and warnings."""
    doc: dict[str, Any] = {
        "run": asdict(run),
        "levels": [row_dict(r) for r in comparison.rows],
        "alerts": [a.to_json() for a in alerts],
        "warnings": list(warnings),
    }
    return json.dumps(doc, indent=2, default=str) + "\n"
