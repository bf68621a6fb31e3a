"""Did a run regress against a baseline?  Level by level, from the per-request records.

Each metric's change is the level summaries' (the numbers every screen shows); whether it
is more than noise is a bootstrap over the two runs' measured requests
(``control.significance``).  A regression is a change to the worse beyond the threshold
whose whole confidence interval lies on the worse side: a busy machine's jitter in a p99
from few requests is wide and so not flagged, a slower engine is.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from control.significance import Interval, bootstrap_change, change
from loadgen.stats import quantile
from runs.records import LevelSummary, RequestRecord, level_name
from store import Store
from store.models import RunInfo
from store.queries import config_differences

DEFAULT_THRESHOLD = 0.10
"""The smallest change to the worse that counts as a regression (10 %, or 10 points of
failure rate) unless the operator says otherwise."""


@dataclass(frozen=True, slots=True)
class Metric:
    name: str
    higher_is_better: bool
    relative: bool
    """Relative change (new / base - 1); else absolute (failure rate, in points)."""
    of_level: Callable[[LevelSummary], float | None]
    statistic: Callable[[Sequence[RequestRecord]], float | None]
    min_requests: int = 10
    """Fewer requests a side are not judged: a bootstrap of a tail percentile needs
    several requests beyond it (``TAIL_REQUESTS``), else its resamples all sit at the
    few largest values and a single stall reads as significant."""


TAIL_REQUESTS = 5


def _beyond(q: float) -> int:
    """Requests a side for ``TAIL_REQUESTS`` of them to lie beyond quantile ``q``."""
    return max(10, round(TAIL_REQUESTS / (1.0 - q)))


def _quantile_of(
    value: Callable[[RequestRecord], float | None], q: float
) -> Callable[[Sequence[RequestRecord]], float | None]:
    def stat(records: Sequence[RequestRecord]) -> float | None:
        ordered = sorted(v for r in records if r.ok and (v := value(r)) is not None)
        return quantile(ordered, q) if ordered else None

    return stat


def _decode_rate(records: Sequence[RequestRecord]) -> float | None:
    """Output tokens over the time requests took, summed: the per-stream rate a closed
    loop's throughput is the concurrency times of."""
    done = [r for r in records if r.ok and r.e2e_s]
    seconds = sum(r.e2e_s or 0.0 for r in done)
    return sum(r.output_tokens for r in done) / seconds if seconds > 0 else None


def _failure_rate(records: Sequence[RequestRecord]) -> float | None:
    return sum(1 for r in records if not r.ok) / len(records) if records else None


def _percentile(name: str, field: str, q: float) -> Metric:
    """``field`` (ttft_s, tpot_s, e2e_s): the level's percentile, the records' quantile."""
    key = {0.5: "p50", 0.99: "p99"}[q]

    def of_level(s: LevelSummary) -> float | None:
        value: float | None = getattr(getattr(s, field), key)
        return value

    def of_record(r: RequestRecord) -> float | None:
        value: float | None = getattr(r, field)
        return value

    return Metric(f"{name} {key}", False, True, of_level, _quantile_of(of_record, q), _beyond(q))


METRICS: tuple[Metric, ...] = (
    Metric("output tok/s", True, True, lambda s: s.output_tok_s, _decode_rate),
    *(
        _percentile(name, field, q)
        for name, field in (("TTFT", "ttft_s"), ("TPOT", "tpot_s"), ("E2E", "e2e_s"))
        for q in (0.5, 0.99)
    ),
    Metric("failure %", False, False, lambda s: s.failure_rate, _failure_rate),
)


@dataclass(frozen=True, slots=True)
class MetricChange:
    metric: str
    base: float | None
    new: float | None
    change: float | None
    """Relative (new / base - 1), or points for the failure rate; None where unknown."""
    interval: Interval | None
    """The bootstrap's 95 % interval of the change; None with too few requests."""
    regression: bool
    min_requests: int
    """Requests a side the metric is judged from."""

    @property
    def significant(self) -> bool:
        return self.interval is not None and not self.interval.holds_zero


@dataclass(frozen=True, slots=True)
class LevelVerdict:
    level: str
    """"c=8" or "4 req/s"."""
    changes: tuple[MetricChange, ...]

    @property
    def regressions(self) -> tuple[MetricChange, ...]:
        return tuple(c for c in self.changes if c.regression)


@dataclass(frozen=True, slots=True)
class RegressionCheck:
    base: RunInfo
    new: RunInfo
    threshold: float
    levels: tuple[LevelVerdict, ...]
    config_differences: tuple[str, ...]
    """What differs between the runs' configurations (checked anyway only when asked)."""
    unmatched: tuple[str, ...]
    """Levels only one of the runs has."""

    @property
    def regressed(self) -> bool:
        return any(level.regressions for level in self.levels)


def judge(
    metric: Metric,
    base: LevelSummary,
    new: LevelSummary,
    base_records: Sequence[RequestRecord],
    new_records: Sequence[RequestRecord],
    threshold: float,
) -> MetricChange:
    a, b = metric.of_level(base), metric.of_level(new)
    moved = None if a is None or b is None else change(a, b, relative=metric.relative)
    enough = min(len(base_records), len(new_records)) >= metric.min_requests
    interval = (
        bootstrap_change(base_records, new_records, metric.statistic, relative=metric.relative)
        if enough
        else None
    )
    sign = -1.0 if metric.higher_is_better else 1.0  # worse is this direction
    worse_beyond = moved is not None and sign * moved > threshold
    interval_worse = interval is not None and (
        interval.high < 0 if metric.higher_is_better else interval.low > 0
    )
    return MetricChange(
        metric.name, a, b, moved, interval, worse_beyond and interval_worse, metric.min_requests
    )


def _key(s: LevelSummary) -> tuple[int | None, float | None]:
    return (s.concurrency, s.request_rate)


def _measured(records: Sequence[RequestRecord]) -> dict[int, list[RequestRecord]]:
    out: dict[int, list[RequestRecord]] = {}
    for r in records:
        if not r.warmup and not r.incomplete:
            out.setdefault(r.level_index, []).append(r)
    return out


def check_regression(
    store: Store, base_run: str, new_run: str, *, threshold: float, any_config: bool = False
) -> RegressionCheck:
    """Every level both runs have, every metric judged.  Raises ValueError where the runs'
    configurations differ, unless ``any_config`` (then the differences are listed)."""
    base, new = store.get_run(base_run), store.get_run(new_run)
    differences = tuple(config_differences(base, new))
    if differences and not any_config:
        raise ValueError(
            f"runs {base.run_id} and {new.run_id} differ in {', '.join(differences)}, so a "
            "change between them is not a regression of one configuration; compare two runs "
            "of the same engine, profile and workload, or pass --any-config to compare anyway"
        )
    base_levels = {_key(lv.summary): lv.summary for lv in store.levels(base.run_id)}
    new_levels = {_key(lv.summary): lv.summary for lv in store.levels(new.run_id)}
    base_records = _measured(list(store.iter_requests(base.run_id)))
    new_records = _measured(list(store.iter_requests(new.run_id)))
    verdicts = []
    for key, b in base_levels.items():
        n = new_levels.get(key)
        if n is None:
            continue
        br, nr = base_records.get(b.level_index, []), new_records.get(n.level_index, [])
        changes = tuple(judge(m, b, n, br, nr, threshold) for m in METRICS)
        verdicts.append(LevelVerdict(level_name(b), changes))
    unmatched = tuple(
        level_name(s)
        for levels, other in ((base_levels, new_levels), (new_levels, base_levels))
        for key, s in levels.items()
        if key not in other
    )
    return RegressionCheck(base, new, threshold, tuple(verdicts), differences, unmatched)
