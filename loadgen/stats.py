"""Level summaries exactly as docs/design.md ("Metric definitions") defines them
(vLLM / SGLang semantics)."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

from loadgen.profiles import Level, Slo
from loadgen.spill import QUANTILES, SpilledValues, percentiles, quantile
from runs.records import LevelSummary, RequestRecord, engine_words

__all__ = [
    "QUANTILES",
    "LevelTally",
    "StridedSample",
    "percentiles",
    "quantile",
    "summarise_level",
]


class StridedSample:
    """Every ``stride``-th value of a level (inter-token gaps, TTFTs), never more than
    ``2 * limit`` kept: the live percentiles stay cheap to sort and bounded in memory
    however long the level runs (the exact ones are the ``LevelTally``'s).  The stride
    doubles as the sample fills, so the sample stays spread over the whole level, not
    its first seconds; the cost is one slice per finished request, nothing per token."""

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


class LevelTally:
    """One level's summary built one record at a time (docs/design.md, "Metric
    definitions"): counts and sums in place, every latency and token count in a
    ``SpilledValues``, so no record is kept and the percentiles are still exact.

    The window runs from the first measured send to the last content chunk of a
    finished request; throughput divides by it, as in vLLM's benchmark. Records sent
    by several load nodes (``RequestRecord.load_node``) carry times on their own node's
    clock: ``clock_offsets_s`` (each node's clock minus the run's timeline) puts their
    sends and ends on one timeline for the window; latencies are differences on one
    node's clock and never use it.
    """

    _METRICS = (
        "ttft_s",
        "tpot_s",
        "itl_s",
        "e2e_s",
        "ttft_from_schedule_s",
        "input_requested",
        "input_sent",
        "output_requested",
        "output_sent",
    )

    def __init__(
        self,
        level_index: int,
        level: Level,
        slo: Slo | None,
        clock_offsets_s: Mapping[str, float] | None = None,
    ) -> None:
        self.level_index, self.level, self.slo = level_index, level, slo
        self.offsets = dict(clock_offsets_s or {})
        self.values = {name: SpilledValues() for name in self._METRICS}
        self.sends = 0
        self.first_send = math.inf
        self.last_send = -math.inf
        self.last_end = -math.inf
        self.completed = self.failed = self.incomplete = self.good = self.mismatches = 0
        self.output_tokens = self.prompt_tokens = 0
        self.failures: Counter[str] = Counter()
        self.samples: dict[str, str] = {}

    def add(self, r: RequestRecord) -> None:
        if r.warmup:
            return
        shift = self.offsets.get(r.load_node, 0.0) if r.load_node is not None else 0.0
        sent = r.sent_at - shift
        self.sends += 1
        self.first_send = min(self.first_send, sent)
        self.last_send = max(self.last_send, sent)
        if r.incomplete:
            self.incomplete += 1
            return
        if not r.ok:
            self.failed += 1
            kind = str(r.error_kind)
            self.failures[kind] += 1
            if r.error_message and kind not in self.samples:  # the engine's own words
                self.samples[kind] = engine_words(r.error_message)
            return
        self.completed += 1
        if r.end_at is not None:
            self.last_end = max(self.last_end, r.end_at - shift)
        self.output_tokens += r.output_tokens
        self.prompt_tokens += r.prompt_tokens or 0
        ttft, tpot, e2e = r.ttft_s, r.tpot_s, r.e2e_s
        if self.slo is not None and self.slo.met_by(ttft, tpot, e2e):
            self.good += 1
        if r.usage_completion_tokens is not None and (
            r.usage_completion_tokens != r.counted_output_tokens
        ):
            self.mismatches += 1
        from_schedule = None if r.first_token_at is None else r.first_token_at - r.scheduled_at
        v = self.values
        for name, value in (
            ("ttft_s", ttft),
            ("tpot_s", tpot),
            ("e2e_s", e2e),
            ("ttft_from_schedule_s", from_schedule),
            ("input_requested", r.requested_prompt_tokens),
            ("input_sent", r.prompt_tokens),
            ("output_requested", r.requested_output_tokens),
            ("output_sent", r.output_tokens),
        ):
            if value is not None:
                v[name].add(value)
        v["itl_s"].extend(r.itl_s)

    def summary(self) -> LevelSummary:
        """The level's summary; its spilled values are released."""
        started = self.first_send if self.sends else 0.0
        ended = self.last_end if self.last_end > -math.inf else started
        window_s = ended - started
        send_span = self.last_send - self.first_send if self.sends > 1 else 0.0
        p = {name: values.percentiles() for name, values in self.values.items()}
        return LevelSummary(
            level_index=self.level_index,
            concurrency=self.level.in_flight_cap,
            request_rate=self.level.offered_rps,
            started_at=started,
            ended_at=ended,
            completed=self.completed,
            failed=self.failed,
            incomplete=self.incomplete,
            output_tok_s=_rate(self.output_tokens, window_s),
            total_tok_s=_rate(self.output_tokens + self.prompt_tokens, window_s),
            request_s=_rate(self.completed, window_s),
            # Offered requests per second actually sent: (n − 1) gaps over the send span.
            achieved_rate=_rate(self.sends - 1, send_span),
            goodput_req_s=None if self.slo is None else _rate(self.good, window_s),
            ttft_s=p["ttft_s"],
            tpot_s=p["tpot_s"],
            itl_s=p["itl_s"],
            e2e_s=p["e2e_s"],
            ttft_from_schedule_s=p["ttft_from_schedule_s"],
            failures_by_kind=dict(self.failures),
            failure_samples=dict(self.samples),
            total_output_tokens=self.output_tokens,
            total_prompt_tokens=self.prompt_tokens,
            input_requested=p["input_requested"],
            input_sent=p["input_sent"],
            output_requested=p["output_requested"],
            output_sent=p["output_sent"],
            usage_mismatches=self.mismatches,
        )


def summarise_level(
    level_index: int,
    level: Level,
    records: Iterable[RequestRecord],
    slo: Slo | None,
    clock_offsets_s: Mapping[str, float] | None = None,
) -> LevelSummary:
    """Summarise the measured (non-warm-up) records of one level (``LevelTally``)."""
    tally = LevelTally(level_index, level, slo, clock_offsets_s)
    for r in records:
        tally.add(r)
    return tally.summary()
