"""What the agent's own engine scrapes cost and how often they fail, and the engines'
latest TTFT / ITL histograms, kept for ``/metrics`` (``agents.metrics``).

A fleet dashboard needs the engines' latency distributions, not a p50 the frame carries,
and needs to see a scrape that is slow or failing before its panels go blank.  Counts
live while the engine is managed and go with it (``forget``).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator
from dataclasses import dataclass

from engines.sample import EngineSample, HistogramSummary

SCRAPE_BUCKETS_S: tuple[float, ...] = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0)
"""Upper bounds of the scrape-duration histogram; the scraper's deadline is at most 2 s."""


@dataclass(frozen=True, slots=True)
class EngineScrapes:
    """One engine's scrape account as ``/metrics`` exposes it."""

    engine_id: str
    kind: str
    bucket_counts: tuple[int, ...]
    """Cumulative counts at each of ``SCRAPE_BUCKETS_S``, then +Inf (= ``count``)."""
    count: int
    sum_s: float
    errors: int
    ttft: HistogramSummary | None
    itl: HistogramSummary | None


class _Account:
    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.per_bucket = [0] * (len(SCRAPE_BUCKETS_S) + 1)
        self.sum_s = 0.0
        self.errors = 0
        self.ttft: HistogramSummary | None = None
        self.itl: HistogramSummary | None = None


class ScrapeStats:
    """Mutated only from the agent's event loop (the scraper), read by ``/metrics``
    on the same loop: no lock."""

    def __init__(self) -> None:
        self._accounts: dict[str, _Account] = {}

    def _account(self, engine_id: str, kind: str) -> _Account:
        account = self._accounts.get(engine_id)
        if account is None or account.kind != kind:  # swapped for another kind: start again
            account = self._accounts[engine_id] = _Account(kind)
        return account

    def observe(self, engine_id: str, kind: str, seconds: float, failed: bool) -> None:
        account = self._account(engine_id, kind)
        account.per_bucket[bisect.bisect_left(SCRAPE_BUCKETS_S, seconds)] += 1
        account.sum_s += seconds
        account.errors += int(failed)

    def latencies(self, engine_id: str, kind: str, sample: EngineSample) -> None:
        """The engine's own TTFT and ITL histograms from its latest good page."""
        account = self._account(engine_id, kind)
        account.ttft = sample.ttft or account.ttft
        account.itl = sample.inter_token_latency or account.itl

    def forget(self, engine_id: str) -> None:
        self._accounts.pop(engine_id, None)

    def engines(self) -> Iterator[EngineScrapes]:
        for engine_id, a in sorted(self._accounts.items()):
            cumulative, running = [], 0
            for n in a.per_bucket:
                running += n
                cumulative.append(running)
            yield EngineScrapes(
                engine_id, a.kind, tuple(cumulative), running, a.sum_s, a.errors, a.ttft, a.itl
            )
