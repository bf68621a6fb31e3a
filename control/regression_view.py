"""A regression check (``control.regression``) as rows and lines of text: one rendering
for ``infer-top compare --baseline`` and the TUI's Compare screen."""

from __future__ import annotations

from control.compare_view import CompareTable
from control.regression import MetricChange, RegressionCheck

COLUMNS = ("level", "metric", "baseline", "run", "change", "95 % interval", "verdict")


def value_text(value: float | None, metric: str) -> str:
    if value is None:
        return "n/a"
    if metric == "failure %":
        return f"{value * 100:.1f}"
    if metric == "output tok/s":
        return f"{value:,.1f}"
    return f"{value * 1000:,.1f} ms"


def change_text(value: float | None, metric: str) -> str:
    if value is None:
        return "n/a"
    return f"{value * 100:+.1f} pt" if metric == "failure %" else f"{value:+.1%}"


def interval_text(c: MetricChange) -> str:
    if c.interval is None:
        return f"needs {c.min_requests} requests"
    return f"{change_text(c.interval.low, c.metric)} .. {change_text(c.interval.high, c.metric)}"


def verdict_text(c: MetricChange) -> str:
    if c.regression:
        return "REGRESSION"
    return "significant" if c.significant else "noise"


def title_of(check: RegressionCheck) -> str:
    return (
        f"{check.new.label} [{check.new.run_id}] against {check.base.label} [{check.base.run_id}]"
    )


def regression_table(check: RegressionCheck) -> CompareTable:
    """Every metric of every shared level, row keys ``level/metric``."""
    rows = tuple(
        (
            f"{level.level}/{c.metric}",
            (
                level.level,
                c.metric,
                value_text(c.base, c.metric),
                value_text(c.new, c.metric),
                change_text(c.change, c.metric),
                interval_text(c),
                verdict_text(c),
            ),
        )
        for level in check.levels
        for c in level.changes
    )
    return CompareTable(COLUMNS, rows, title_of(check))


def findings(check: RegressionCheck, most: int | None = None) -> list[str]:
    """What an operator reads under the table: differences between the runs, levels only
    one has, and each regression (or that there was none beyond the threshold); past
    ``most`` regressions, one line counts the rest (a screen has rows marked for them)."""
    lines = []
    if check.config_differences:
        lines.append(f"note: the runs differ in {', '.join(check.config_differences)}")
    if check.unmatched:
        lines.append(f"levels only one run has: {', '.join(check.unmatched)}")
    found = [(lv.level, c) for lv in check.levels for c in lv.regressions]
    if not found:
        lines.append(f"no regression beyond {check.threshold:.0%}")
    shown = found if most is None else found[:most]
    lines.extend(
        f"regression at {level}: {c.metric} {change_text(c.change, c.metric)}" for level, c in shown
    )
    if len(shown) < len(found):
        lines.append(f"and {len(found) - len(shown)} more: the rows marked REGRESSION")
    return lines
