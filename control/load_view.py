"""The Load screen's level table as a view-model (free of Textual): one row per level,
from its live progress and its final summary, with every per-request percentile from too
few requests marked (the rule is ``runs.records.samples_needed``; ITL pools every gap
between chunks, so its samples are not the requests)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from control.model import fmt
from runs.events import LevelProgress, LevelStarted
from runs.records import LevelSummary, level_name, percentile_sufficient

LevelRow = tuple[str, tuple[str, ...]]
"""(key: the level's index, cells in LOAD_LEVEL_COLUMNS' order)."""

# The unit (ms) is in the caption above the table; the first nine fit the 74 columns left
# of the GPU panel at 120 wide (each cell pads 1 each side), the rest scroll into view.
LOAD_LEVEL_COLUMNS = (
    ("Level", 7),
    ("OK", 4),
    ("Fail", 4),
    ("in flight", 9),
    ("req/s", 5),
    ("tok/s", 6),
    ("TTFT p50", 8),
    ("TTFT p99", 8),
    ("TPOT p50", 8),
    ("E2E p50", 7),
    ("E2E p99", 7),
    ("ITL p50", 7),
    ("ITL p99", 7),
    ("goodput", 7),
)
FEW = "*"
"""Marks a percentile from fewer requests than it needs (``runs.records.samples_needed``)."""


def _ms(v: float | None, digits: int = 0) -> str:
    return fmt(None if v is None else v * 1000, "", digits)


def _pct(v: float | None, quantile: float, samples: int, digits: int = 0) -> str:
    """A latency percentile in ms, marked when its requests are too few for it."""
    shown = _ms(v, digits)
    return shown + FEW if v is not None and not percentile_sufficient(quantile, samples) else shown


DONE = "done"
"""The "in flight" cell of a finished level."""


def level_row(summary: LevelSummary) -> LevelRow:
    n = summary.completed
    goodput = summary.goodput_req_s
    return (
        str(summary.level_index),
        (
            level_name(summary),
            str(n),
            str(summary.failed),
            DONE,
            fmt(summary.request_s, "", 1),
            fmt(summary.output_tok_s),
            _pct(summary.ttft_s.p50, 0.5, n),
            _pct(summary.ttft_s.p99, 0.99, n),
            _pct(summary.tpot_s.p50, 0.5, n, 1),
            _pct(summary.e2e_s.p50, 0.5, n),
            _pct(summary.e2e_s.p99, 0.99, n),
            _ms(summary.itl_s.p50, 1),  # pooled over every gap between chunks, not per
            _ms(summary.itl_s.p99, 1),  # request: its samples are not the requests' count
            "no SLO" if goodput is None else fmt(goodput, "", 1),
        ),
    )


def started_row(event: LevelStarted) -> LevelRow:
    level = (
        f"c={event.concurrency}" if event.request_rate is None else f"{event.request_rate:g} req/s"
    )
    blank = ("-",) * (len(LOAD_LEVEL_COLUMNS) - 4)
    return (str(event.level_index), (level, "0", "0", "starting", *blank))


def progress_row(event: LevelProgress, level: str) -> LevelRow:
    """A level part-way (what its progress events carry; the rest once it finishes)."""
    n = event.completed
    return (
        str(event.level_index),
        (
            level,
            str(n),
            str(event.failed),
            str(event.in_flight),
            "-",
            fmt(event.output_tok_s),
            _pct(event.ttft_p50_s, 0.5, n),
            _pct(event.ttft_p99_s, 0.99, n),
            "-",
            "-",
            "-",
            _ms(event.itl_p50_s, 1),
            _ms(event.itl_p99_s, 1),
            "-",
        ),
    )


def finished_levels(rows: Iterable[Sequence[object]]) -> int:
    """How many of the table's rows (their cells) are finished levels."""
    return sum(1 for cells in rows if str(cells[3]) == DONE)
