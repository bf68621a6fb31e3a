"""A comparison as the Compare screen shows it (free of Textual, so tests read it)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from control.report_data import Report, failures_words, level_columns
from store.models import Comparison, ComparisonRow


@dataclass(frozen=True, slots=True)
class CompareTable:
    columns: tuple[str, ...]
    rows: tuple[tuple[str, tuple[str, ...]], ...]
    """(run_id, cells) in the order of the comparison's runs."""
    title: str = ""
    unfinished: int = 0
    """Runs without a finished level (their rows show "-")."""


@dataclass(frozen=True, slots=True)
class Curve:
    label: str
    concurrency: tuple[int, ...]
    output_tok_s: tuple[float, ...]
    ttft_p50_ms: tuple[float | None, ...]


def _by_run(rows: Sequence[ComparisonRow]) -> dict[str, list[ComparisonRow]]:
    out: dict[str, list[ComparisonRow]] = {}
    for row in rows:
        if row.concurrency is not None:
            out.setdefault(row.run_id, []).append(row)
    for levels in out.values():
        levels.sort(key=lambda r: r.concurrency or 0)
    return out


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value * 1000:,.0f}"


def comparison_table(comparison: Comparison) -> CompareTable:
    """One row per run: tok/s at each concurrency, then TTFT p50 / p99, failures and
    tok/J at the highest concurrency every run reached (the seed's H100 table)."""
    by_run = _by_run(comparison.rows)
    levels = sorted({r.concurrency for rs in by_run.values() for r in rs if r.concurrency})
    common = [
        c for c in levels if all(any(r.concurrency == c for r in rs) for rs in by_run.values())
    ]
    top = common[-1] if common else (levels[-1] if levels else None)
    nodes = {run.node for run in comparison.runs}
    show_node = len(nodes) > 1
    columns = (
        "Engine",
        *(("Node",) if show_node else ()),
        *(f"@{c}" for c in levels),
        "TTFT p50 ms",
        "TTFT p99 ms",
        "fail %",
        "tok/J",
    )
    rows: list[tuple[str, tuple[str, ...]]] = []
    for run in comparison.runs:
        rs = by_run.get(run.run_id, [])
        at = {r.concurrency: r for r in rs}
        peak = at.get(top)
        cells = (
            comparison.label(run),
            *((run.node or "?",) if show_node else ()),
            *(f"{at[c].output_tok_s:,.0f}" if c in at else "-" for c in levels),
            _ms(peak.ttft_p50_s) if peak else "-",
            _ms(peak.ttft_p99_s) if peak else "-",
            f"{peak.failure_rate * 100:.1f}" if peak else "-",
            (
                f"{peak.tok_per_j:.2f}"
                if peak and peak.tok_per_j is not None
                else ("n/a" if peak else "-")
            ),
        )
        rows.append((run.run_id, cells))
    node_text = next(iter(nodes)) if len(nodes) == 1 else "several nodes"
    title = (
        f"output tok/s at each concurrency; TTFT (ms), failures and tok/J at "
        f"{top} concurrent; {node_text}"
    )
    unfinished = sum(1 for run in comparison.runs if run.run_id not in by_run)
    return CompareTable(columns, tuple(rows), title, unfinished)


def comparison_curves(comparison: Comparison) -> list[Curve]:
    by_run = _by_run(comparison.rows)
    curves = []
    for run in comparison.runs:
        rs = by_run.get(run.run_id, [])
        if not rs:
            continue
        curves.append(
            Curve(
                label=comparison.label(run),
                concurrency=tuple(r.concurrency or 0 for r in rs),
                output_tok_s=tuple(r.output_tok_s for r in rs),
                ttft_p50_ms=tuple(
                    None if r.ttft_p50_s is None else r.ttft_p50_s * 1000 for r in rs
                ),
            )
        )
    return curves


def levels_table(report: Report) -> CompareTable:
    """Every level of every run, one row each: the report's per-level figures
    (``control.report_data.level_columns``, cost included) and the failures by kind."""
    columns = level_columns(report.prices.currency)
    rows: list[tuple[str, tuple[str, ...]]] = []
    for run in report.runs:
        for lv in run.levels:
            cells = tuple(_figure(c.value(lv), c.scale, c.digits) for c in columns)
            rows.append(
                (
                    f"{run.info.run_id}:{lv.summary.level_index}",
                    (run.label, lv.name, *cells, failures_words(lv)),
                )
            )
    title = "every level of every run" + (
        "" if report.prices.configured else " (no prices configured: cost n/a)"
    )
    return CompareTable(
        ("Engine", "level", *(c.header for c in columns), "failures"), tuple(rows), title
    )


def _figure(value: float | None, scale: float, digits: int) -> str:
    return "n/a" if value is None else f"{value * scale:,.{digits}f}"
