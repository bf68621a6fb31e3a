"""Prometheus text → series table, through prometheus_client's own parser.

Engines label their series differently (vLLM's ``engine`` / ``model_name``,
SGLang's ``tp_rank``, none at all for llama.cpp), so lookups here aggregate over
every label set of a series name: counts are summed, ratios averaged.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from engines.sample import HistogramSummary


class MetricsParseError(ValueError):
    """A metrics payload that is not what the engine's dialect promises."""


def decode_payload(payload: str | bytes, *, what: str) -> str:
    if isinstance(payload, bytes):
        try:
            return payload.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise MetricsParseError(f"{what}: payload is not UTF-8 ({exc})") from exc
    if not isinstance(payload, str):
        raise MetricsParseError(f"{what}: expected text or bytes, got {type(payload).__name__}")
    return payload


@dataclass(frozen=True, slots=True)
class Point:
    name: str
    labels: tuple[tuple[str, str], ...]
    value: float

    @property
    def key(self) -> str:
        if not self.labels:
            return self.name
        inner = ",".join(f'{k}="{v}"' for k, v in self.labels)
        return f"{self.name}{{{inner}}}"


class SeriesTable:
    """Every sample of one scrape, indexed by exposed series name."""

    def __init__(self, points: Iterable[Point]) -> None:
        self._by_name: dict[str, list[Point]] = defaultdict(list)
        for point in points:
            self._by_name[point.name].append(point)

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def __len__(self) -> int:
        return sum(len(v) for v in self._by_name.values())

    def raw(self) -> dict[str, float]:
        return {p.key: p.value for pts in self._by_name.values() for p in pts}

    def first_present(self, names: Iterable[str]) -> str | None:
        return next((n for n in names if n in self._by_name), None)

    def total(self, names: Iterable[str]) -> float | None:
        """Sum over label sets of the first series name that is present."""
        name = self.first_present(names)
        if name is None:
            return None
        return _finite(sum(p.value for p in self._by_name[name]))

    def mean(self, names: Iterable[str]) -> float | None:
        """Mean over label sets (a ratio reported once per engine / rank)."""
        name = self.first_present(names)
        if name is None:
            return None
        values = [p.value for p in self._by_name[name]]
        return _finite(sum(values) / len(values))

    def histogram(self, bases: Iterable[str]) -> HistogramSummary | None:
        """The first histogram base name with a ``_count`` series, summed over labels.

        A bucket count that is not finite (NaN, ±Inf) makes the whole histogram not
        reported: its quantiles would come out NaN or infinite, never a latency."""
        for base in bases:
            count = self.total([f"{base}_count"])
            if count is None:
                continue
            total_s = self.total([f"{base}_sum"])
            if total_s is None:
                continue
            by_bound: dict[float, float] = defaultdict(float)
            for point in self._by_name.get(f"{base}_bucket", []):
                bound = _bound(dict(point.labels).get("le"))
                if bound is not None:
                    by_bound[bound] += point.value
            if not all(math.isfinite(cum) for cum in by_bound.values()):
                return None
            buckets = tuple(sorted(by_bound.items()))
            return HistogramSummary(count=count, sum_s=total_s, buckets=buckets)
        return None


def _bound(le: str | None) -> float | None:
    """A bucket's upper bound: finite, or +Inf for the last bucket; anything else (no
    number, NaN, -Inf) is no bound and the bucket is skipped."""
    if le is None:
        return None
    try:
        bound = float(le)
    except ValueError:
        return None
    return bound if math.isfinite(bound) or bound > 0 else None


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def parse_prometheus(payload: str | bytes, *, what: str = "metrics") -> SeriesTable:
    """Parse Prometheus text exposition; raise MetricsParseError, never another type.

    An empty payload, or one with no samples at all (an HTML error page that
    happens to parse as comments), is an error: "no metrics" is not "all zero".
    """
    text = decode_payload(payload, what=what)
    points: list[Point] = []
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                labels = tuple(sorted((str(k), str(v)) for k, v in sample.labels.items()))
                points.append(Point(sample.name, labels, float(sample.value)))
    except Exception as exc:  # the parser raises ValueError, IndexError, TypeError...
        line = _offending_line(text, exc)
        raise MetricsParseError(f"{what}: not Prometheus text ({exc}){line}") from exc
    if not points:
        raise MetricsParseError(f"{what}: no samples in {len(text)} characters")
    return SeriesTable(points)


def _offending_line(text: str, exc: Exception) -> str:
    detail = str(exc)
    for raw in text.splitlines():
        if raw and raw in detail:
            return f" at line {raw[:80]!r}"
    return ""


def ratio(hits: float | None, queries: float | None) -> float | None:
    """hits / queries, None when either is missing or no query happened yet."""
    if hits is None or queries is None or queries <= 0:
        return None
    return min(max(hits / queries, 0.0), 1.0)


def as_float(value: object) -> float | None:
    """A JSON number as float; None for anything else (bool, str, null, NaN).

    JSON integers are unbounded: one beyond any float is an impossible reading,
    refused as MetricsParseError (an OverflowError would escape every caller)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        return _finite(float(value))
    except OverflowError:
        raise MetricsParseError("an integer beyond 1.8e308 is no plausible metric value") from None


def get_path(obj: object, *keys: str) -> object:
    for key in keys:
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(key)
    return obj
