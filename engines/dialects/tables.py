"""A table of which Prometheus series hold which sample field, and its reading.

Each engine's table is declared on its spec (``EngineSpec.metric_names``), with
names from the engines' own sources (see the provenance headers in
``tests/fixtures/engines/``).  A field's names are tried in order and the first
present series wins, so an unknown version still finds whichever name the
engine actually exports; a known version only looks at the names it has.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from engines.dialects.prom import SeriesTable, parse_prometheus, ratio
from engines.sample import EngineSample

Names = tuple[str, ...]


@dataclass(frozen=True, slots=True)
class PromDialect:
    kv_usage: Names = ()
    running: Names = ()
    waiting: Names = ()
    prompt_tokens: Names = ()
    generation_tokens: Names = ()
    preemptions: Names = ()
    prefix_hit_rate: Names = ()
    """A 0–1 gauge the engine computes itself."""
    prefix_hits: Names = ()
    prefix_queries: Names = ()
    """Counters: hit rate = hits / queries (vLLM: tokens queried)."""
    prefix_misses: Names = ()
    """Counters: hit rate = hits / (hits + misses) (llama.cpp: uncached prompt tokens)."""
    ttft: Names = ()
    itl: Names = ()
    e2e: Names = ()

    def sample_from(
        self, table: SeriesTable, *, engine: str, version: str | None = None
    ) -> EngineSample:
        hit_rate = table.mean(self.prefix_hit_rate)
        if hit_rate is None and self.prefix_hits:
            hits = table.total(self.prefix_hits)
            if self.prefix_queries:
                hit_rate = ratio(hits, table.total(self.prefix_queries))
            elif self.prefix_misses:
                misses = table.total(self.prefix_misses)
                hit_rate = ratio(hits, None if hits is None or misses is None else hits + misses)
        kv = table.mean(self.kv_usage)
        return EngineSample(
            engine=engine,
            kv_cache_usage=None if kv is None else min(max(kv, 0.0), 1.0),
            requests_running=table.total(self.running),
            requests_waiting=table.total(self.waiting),
            prompt_tokens_total=table.total(self.prompt_tokens),
            generation_tokens_total=table.total(self.generation_tokens),
            preemptions_total=table.total(self.preemptions),
            prefix_cache_hit_rate=hit_rate,
            ttft=table.histogram(self.ttft),
            inter_token_latency=table.histogram(self.itl),
            e2e_latency=table.histogram(self.e2e),
            engine_version=version,
            raw=table.raw(),
        )

    def parse(
        self, payload: str | bytes, *, engine: str, version: str | None = None
    ) -> EngineSample:
        table = parse_prometheus(payload, what=f"{engine} metrics")
        return self.sample_from(table, engine=engine, version=version)


_VERSION = re.compile(r"^\s*v?(\d+)\.(\d+)")


def version_tuple(version: str | None) -> tuple[int, int] | None:
    """(major, minor) from "0.11.0", "v0.9.2rc1", "0.10.1+cu128"; None if unknown."""
    if not version:
        return None
    match = _VERSION.match(version)
    return (int(match[1]), int(match[2])) if match else None
