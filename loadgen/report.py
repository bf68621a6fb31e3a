"""A finished run as a rich table, a JSON document and a CSV of its levels."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

from rich.table import Table

from runs.codec import summary_to_dict
from runs.events import RunResult
from runs.records import (
    TOKEN_FIELDS,
    LevelSummary,
    Percentiles,
    failures_field,
    failures_sampled,
    token_deviations,
    tokens_text,
)

_PCT_FIELDS = ("p50", "p90", "p95", "p99", "p999", "mean")
_PCT_METRICS = ("ttft_s", "tpot_s", "itl_s", "e2e_s", "ttft_from_schedule_s")


def level_label(s: LevelSummary) -> str:
    if s.request_rate is not None:
        cap = f" ≤{s.concurrency}" if s.concurrency else ""
        return f"{s.request_rate:g} req/s{cap}"
    return f"c={s.concurrency}"


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value * 1000:.1f}"


def summary_table(result: RunResult) -> Table:
    table = Table(title=f"infer-top bench — run {result.run_id}", title_justify="left")
    for name in ("level", "ok", "failed", "sent/s", "req/s", "out tok/s", "total tok/s"):
        table.add_column(name, justify="right")
    for name in ("TTFT p50 ms", "TTFT p99 ms", "TPOT p50 ms", "ITL p99 ms", "E2E p50 s"):
        table.add_column(name, justify="right")
    table.add_column("goodput req/s", justify="right")
    for s in result.levels:
        failed = str(s.failed)
        if s.incomplete:
            failed += f" +{s.incomplete} cut"
        table.add_row(
            level_label(s),
            str(s.completed),
            failed,
            f"{s.achieved_rate:.2f}",
            f"{s.request_s:.2f}",
            f"{s.output_tok_s:.1f}",
            f"{s.total_tok_s:.1f}",
            _ms(s.ttft_s.p50),
            _ms(s.ttft_s.p99),
            _ms(s.tpot_s.p50),
            _ms(s.itl_s.p99),
            "n/a" if s.e2e_s.p50 is None else f"{s.e2e_s.p50:.2f}",
            "n/a" if s.goodput_req_s is None else f"{s.goodput_req_s:.2f}",
        )
    return table


def failure_lines(result: RunResult) -> list[str]:
    """One line per level and failure kind, with a sample of the engine's own message
    (too wide for the table)."""
    return [
        f"failures at {level_label(s)}: {line}"
        for s in result.levels
        for line in failures_sampled(s.failures_by_kind, s.failure_samples)
    ]


def token_lines(result: RunResult) -> list[str]:
    """Requested vs engine-counted tokens per level, always shown beside the table."""
    return [f"tokens at {level_label(s)}: {tokens_text(s)}" for s in result.levels]


def result_document(result: RunResult, context: dict[str, Any]) -> dict[str, Any]:
    """The JSON written by ``--json``; ``context`` holds target / spec / workload."""
    return {
        "run_id": result.run_id,
        "started_at": result.started_at,
        "ended_at": result.ended_at,
        "warnings": [*result.warnings, *token_deviations(result.levels)],
        "records_written": result.records_written,
        **context,
        "levels": [summary_to_dict(s) for s in result.levels],
    }


def write_json(path: str | Path, result: RunResult, context: dict[str, Any]) -> None:
    text = json.dumps(result_document(result, context), indent=2, default=str)
    Path(path).write_text(text + "\n", encoding="utf-8")


def csv_row(s: LevelSummary) -> dict[str, Any]:
    row: dict[str, Any] = {
        "level_index": s.level_index,
        "concurrency": s.concurrency,
        "request_rate": s.request_rate,
        "completed": s.completed,
        "failed": s.failed,
        "incomplete": s.incomplete,
        "failure_rate": s.failure_rate,
        "output_tok_s": s.output_tok_s,
        "total_tok_s": s.total_tok_s,
        "request_s": s.request_s,
        "achieved_rate": s.achieved_rate,
        "goodput_req_s": s.goodput_req_s,
    }
    for metric in _PCT_METRICS:
        pct: Percentiles = getattr(s, metric)
        for field in _PCT_FIELDS:
            row[f"{metric.removesuffix('_s')}_{field}_s"] = getattr(pct, field)
    for metric in TOKEN_FIELDS:
        tokens: Percentiles = getattr(s, metric)
        for field in ("mean", "p50", "p99"):
            row[f"{metric}_{field}_tokens"] = getattr(tokens, field)
    row["total_output_tokens"] = s.total_output_tokens
    row["total_prompt_tokens"] = s.total_prompt_tokens
    row["usage_mismatches"] = s.usage_mismatches
    row["failures_by_kind"] = failures_field(s.failures_by_kind)
    return row


def write_csv(path: str | Path, levels: tuple[LevelSummary, ...]) -> None:
    rows = [csv_row(s) for s in levels]
    with Path(path).open("w", newline="", encoding="utf-8") as fh:
        if not rows:
            return
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
