"""A comparison as CSV, JSON or Markdown; a run's requests as JSONL.

The Markdown has one table per load level, shaped like the survey's table
(docs/design.md, "Metric definitions": "| H100, Llama-2-7B class, 64 concurrent | tok/s |"), so it
pastes into a report as it is.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable
from dataclasses import asdict
from typing import IO, Any

from runs.records import RequestRecord, failures_field, failures_text
from store.labels import run_model
from store.models import Comparison, ComparisonRow, RunInfo, request_to_json

CSV_FIELDS = (
    "run_id",
    "label",
    "engine_kind",
    "node",
    "simulated",
    "level_index",
    "concurrency",
    "request_rate",
    "started_at",
    "ended_at",
    "output_tok_s",
    "request_s",
    "ttft_p50_s",
    "ttft_p99_s",
    "tpot_p50_s",
    "failure_rate",
    "total_output_tokens",
    "mean_gpu_util_pct",
    "mean_power_w",
    "energy_j",
    "j_per_token",
    "tok_per_j",
    "energy_source",
    "failures_by_kind",
    "peak_gpu_mem_bytes",
    "kv_cache_peak",
)


def row_dict(row: ComparisonRow) -> dict[str, Any]:
    out = {name: getattr(row, name) for name in CSV_FIELDS}
    out["failures_by_kind"] = failures_field(row.failures_by_kind)
    return out


def comparison_to_csv(comparison: Comparison) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=CSV_FIELDS, lineterminator="\n")
    writer.writeheader()
    for row in comparison.rows:
        writer.writerow({k: "" if v is None else v for k, v in row_dict(row).items()})
    return out.getvalue()


def comparison_to_json(comparison: Comparison) -> str:
    doc = {
        "runs": [asdict(r) for r in comparison.runs],
        "rows": [row_dict(r) for r in comparison.rows],
        "warnings": list(comparison.warnings),
    }
    return json.dumps(doc, indent=2, default=str) + "\n"


def _level_title(rows: list[ComparisonRow], runs: dict[str, RunInfo]) -> str:
    nodes = sorted({r.node for r in rows if r.node})
    models = {run_model(runs[r.run_id]) for r in rows}
    first = rows[0]
    if first.concurrency is not None:
        load = f"{first.concurrency} concurrent"
    else:
        load = f"{first.request_rate:g} req/s"
    # a node or model in the title is every row's; where they differ each row says its own
    shared = [*(nodes if len(nodes) == 1 else []), *(m for m in models if len(models) == 1 and m)]
    return ", ".join([*shared, load])


def _note(row: ComparisonRow, rows: list[ComparisonRow], runs: dict[str, RunInfo]) -> str:
    notes: list[str] = []
    ttfts = [r.ttft_p50_s for r in rows if r.ttft_p50_s is not None]
    if len(rows) > 1 and row.ttft_p50_s is not None and row.ttft_p50_s == min(ttfts):
        notes.append("lowest TTFT")
    if row.failure_rate > 0:
        kinds = failures_text(row.failures_by_kind)
        notes.append(f"{row.failure_rate:.1%} failed" + (f": {kinds}" if kinds else ""))
    models = {run_model(runs[r.run_id]) for r in rows}
    if len(models) > 1:
        notes.append(f"model {run_model(runs[row.run_id]) or 'not recorded'}")
    nodes = {r.node for r in rows}
    if len(nodes) > 1:
        notes.append(f"node {row.node or 'not recorded'}")
    if row.simulated:
        notes.append("simulated")
    return "; ".join(notes)


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value * 1000:,.1f}"


def comparison_to_markdown(comparison: Comparison, *, detailed: bool = False) -> str:
    """One table per load level: run, tok/s, note (``detailed`` adds TTFT,
    TPOT, failure rate and J/token columns before the note)."""
    runs = {r.run_id: r for r in comparison.runs}
    by_level: dict[tuple[int | None, float | None], list[ComparisonRow]] = {}
    for row in comparison.rows:
        by_level.setdefault(row.level_key, []).append(row)
    tables: list[str] = []
    for rows in by_level.values():
        rows = sorted(rows, key=lambda r: -r.output_tok_s)
        title = _level_title(rows, runs).replace("|", "/")
        header = [title, "tok/s"]
        if detailed:
            header += ["TTFT p50 ms", "TTFT p99 ms", "TPOT p50 ms", "failed", "J/token"]
        header.append("note")
        lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        for row in rows:
            cells = [row.label.replace("|", "/"), f"{row.output_tok_s:,.0f}"]
            if detailed:
                jpt = row.j_per_token
                cells += [
                    _ms(row.ttft_p50_s),
                    _ms(row.ttft_p99_s),
                    _ms(row.tpot_p50_s),
                    f"{row.failure_rate:.1%}",
                    "n/a" if jpt is None else f"{jpt:.3f}",
                ]
            note = _note(row, rows, runs)
            cells.append(note.replace("|", "/"))
            lines.append(("| " + " | ".join(cells) + " |").replace("|  |", "| |"))
        tables.append("\n".join(lines))
    flagged = [f"> warning: {w}".replace("\n", " ") for w in comparison.warnings]
    return "\n\n".join([*tables, *(["\n".join(flagged)] if flagged else [])]) + "\n"


def requests_to_jsonl(records: Iterable[RequestRecord], out: IO[str]) -> int:
    """Write one JSON object per request; returns how many were written."""
    n = 0
    for record in records:
        out.write(json.dumps(request_to_json(record)) + "\n")
        n += 1
    return n
