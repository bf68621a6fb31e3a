"""Level summaries exactly as docs/design.md ("Metric definitions") defines them
(vLLM / SGLang semantics)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

from loadgen.profiles import Level, Slo
from runs.records import LevelSummary, Percentiles, RequestRecord, engine_words

QUANTILES = (0.5, 0.9, 0.95, 0.99, 0.999)


def quantile(sorted_values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default ``linear``)."""
    if not sorted_values:
        raise ValueError("quantile of no values")
    pos = (len(sorted_values) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def percentiles(values: Iterable[float]) -> Percentiles:
    ordered = sorted(values)
    if not ordered:
        return Percentiles()
    p50, p90, p95, p99, p999 = (quantile(ordered, q) for q in QUANTILES)
    return Percentiles(p50, p90, p95, p99, p999, sum(ordered) / len(ordered))


class GapSample:
    """Every ``stride``-th inter-token gap of a level, never more than ``2 * limit`` kept:
    the live ITL percentiles stay cheap to sort however long the level runs (the exact
    ones come from every record when the level ends).  The stride doubles as the sample
    fills, so the sample stays spread over the whole level, not its first seconds; the
    cost is one slice per finished request, nothing per token in Python."""

    __slots__ = ("limit", "seen", "stride", "values")

    def __init__(self, limit: int = 4096) -> None:
        self.limit = limit
        self.stride = 1
        self.seen = 0
        self.values: list[float] = []

    def add(self, gaps: Sequence[float]) -> None:
        # Keep the gaps whose index over the whole level is a multiple of the stride.
        self.values.extend(gaps[-self.seen % self.stride :: self.stride])
        self.seen += len(gaps)
        if len(self.values) >= 2 * self.limit:
            self.values = self.values[::2]
            self.stride *= 2


def _rate(count: int, span_s: float) -> float:
    return count / span_s if span_s > 0 else 0.0


def _samples(failed: Iterable[RequestRecord]) -> dict[str, str]:
    """The first message of each failure kind, in the engine's own words."""
    samples: dict[str, str] = {}
    for r in failed:
        if r.error_message and str(r.error_kind) not in samples:
            samples[str(r.error_kind)] = engine_words(r.error_message)
    return samples


def summarise_level(
    level_index: int,
    level: Level,
    records: Sequence[RequestRecord],
    slo: Slo | None,
    clock_offsets_s: Mapping[str, float] | None = None,
) -> LevelSummary:
    """Summarise the measured (non-warm-up) records of one level.

    The window runs from the first measured send to the last content chunk of a
    finished request; throughput divides by it, as in vLLM's benchmark. Records sent
    by several load nodes (``RequestRecord.load_node``) carry times on their own node's
    clock: ``clock_offsets_s`` (each node's clock minus the run's timeline) puts their
    sends and ends on one timeline for the window; latencies are differences on one
    node's clock and never use it.
    """
    offsets = clock_offsets_s or {}

    def shift(r: RequestRecord) -> float:
        return offsets.get(r.load_node, 0.0) if r.load_node is not None else 0.0

    measured = [r for r in records if not r.warmup]
    done = [r for r in measured if r.ok and not r.incomplete]
    failed = [r for r in measured if not r.ok and not r.incomplete]
    incomplete = sum(1 for r in measured if r.incomplete)
    sends = sorted(r.sent_at - shift(r) for r in measured)
    started = sends[0] if sends else 0.0
    ends = [r.end_at - shift(r) for r in done if r.end_at is not None]
    ended = max(ends, default=started)
    window_s = ended - started

    out_tokens = sum(r.output_tokens for r in done)
    prompt_tokens = sum(r.prompt_tokens or 0 for r in done)
    send_span = sends[-1] - sends[0] if len(sends) > 1 else 0.0
    goodput = None
    if slo is not None:
        good = sum(1 for r in done if slo.met_by(r.ttft_s, r.tpot_s, r.e2e_s))
        goodput = _rate(good, window_s)

    def pct(values: Iterable[float | None]) -> Percentiles:
        return percentiles(v for v in values if v is not None)

    return LevelSummary(
        level_index=level_index,
        concurrency=level.in_flight_cap,
        request_rate=level.offered_rps,
        started_at=started,
        ended_at=ended,
        completed=len(done),
        failed=len(failed),
        incomplete=incomplete,
        output_tok_s=_rate(out_tokens, window_s),
        total_tok_s=_rate(out_tokens + prompt_tokens, window_s),
        request_s=_rate(len(done), window_s),
        # Offered requests per second actually sent: (n − 1) gaps over the send span.
        achieved_rate=_rate(len(sends) - 1, send_span),
        goodput_req_s=goodput,
        ttft_s=pct(r.ttft_s for r in done),
        tpot_s=pct(r.tpot_s for r in done),
        itl_s=percentiles(gap for r in done for gap in r.itl_s),
        e2e_s=pct(r.e2e_s for r in done),
        ttft_from_schedule_s=pct(
            None if r.first_token_at is None else r.first_token_at - r.scheduled_at for r in done
        ),
        failures_by_kind=dict(Counter(str(r.error_kind) for r in failed)),
        failure_samples=_samples(failed),
        total_output_tokens=out_tokens,
        total_prompt_tokens=prompt_tokens,
        input_requested=pct(r.requested_prompt_tokens for r in done),
        input_sent=pct(r.prompt_tokens for r in done),
        output_requested=pct(r.requested_output_tokens for r in done),
        output_sent=pct(r.output_tokens for r in done),
        usage_mismatches=sum(
            1
            for r in done
            if r.usage_completion_tokens is not None
            and r.usage_completion_tokens != r.counted_output_tokens
        ),
    )
