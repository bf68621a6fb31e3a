"""The one normalised engine sample every metrics dialect is parsed into.

A value the engine does not report is ``None`` (shown as "n/a"), never 0: an
operator must be able to tell "idle" from "not measured".
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any


@dataclass(frozen=True, slots=True)
class HistogramSummary:
    """A Prometheus histogram reduced to what infer-top shows.

    ``buckets`` are cumulative ``(upper_bound_s, count)`` pairs, ``+Inf`` last.
    """

    count: float
    sum_s: float
    buckets: tuple[tuple[float, float], ...] = ()

    def quantile_s(self, q: float) -> float | None:
        """Quantile by linear interpolation inside the bucket (Prometheus'
        ``histogram_quantile`` rule); None when there are no observations."""
        if self.count <= 0 or not self.buckets:
            return None
        rank = q * self.count
        prev_bound, prev_count = 0.0, 0.0
        for bound, cum in self.buckets:
            if cum >= rank:
                if bound == float("inf"):
                    return prev_bound
                width = cum - prev_count
                frac = (rank - prev_count) / width if width > 0 else 0.0
                return prev_bound + (bound - prev_bound) * frac
            prev_bound, prev_count = bound, cum
        return prev_bound


@dataclass(frozen=True, slots=True)
class EngineSample:
    """One scrape of one engine, normalised across dialects."""

    engine: str
    """The engine's kind in the catalog (``EngineSpec.kind``)."""
    kv_cache_usage: float | None = None
    """Fraction 0–1 of the KV cache in use."""
    kv_cache_usage_is_estimate: bool = False
    """True where infer-top derived the KV use (llama.cpp slot contexts)."""
    requests_running: float | None = None
    requests_waiting: float | None = None
    prompt_tokens_total: float | None = None
    generation_tokens_total: float | None = None
    generation_tokens_in_flight: float | None = None
    """Tokens decoded so far by requests still running (llama.cpp ``/slots``)."""
    preemptions_total: float | None = None
    prefix_cache_hit_rate: float | None = None
    """Fraction 0–1 of prompt tokens served from the prefix cache since the engine
    started (its hit / query counters, or the gauge it computes itself); None where it
    reports none or has looked no prompt up (vLLM with prefix caching off)."""
    ttft: HistogramSummary | None = None
    inter_token_latency: HistogramSummary | None = None
    e2e_latency: HistogramSummary | None = None
    engine_version: str | None = None
    raw: Mapping[str, float] = field(default_factory=dict)
    """Every numeric series as scraped, keyed by ``name{label="v",...}``."""


def gaps_filled(first: EngineSample, then: EngineSample) -> EngineSample:
    """``first``, each field it left unmeasured (None) taken from ``then``: two pages of
    one engine that report overlapping fields, the more direct one first."""
    values: dict[str, Any] = {}
    for item in fields(EngineSample):
        if item.name not in ("raw", "kv_cache_usage_is_estimate"):
            mine = getattr(first, item.name)
            values[item.name] = getattr(then, item.name) if mine is None else mine
    kv_from = first if first.kv_cache_usage is not None else then
    return EngineSample(
        **values,
        kv_cache_usage_is_estimate=kv_from.kv_cache_usage_is_estimate,
        raw={**then.raw, **first.raw},
    )
