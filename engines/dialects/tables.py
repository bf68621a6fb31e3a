"""Which Prometheus series each engine (and engine version) reports for what.

The names come from the engines' own sources (see the provenance headers in
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
    engine: str
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

    def sample_from(self, table: SeriesTable, *, version: str | None = None) -> EngineSample:
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
            engine=self.engine,
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

    def parse(self, payload: str | bytes, *, version: str | None = None) -> EngineSample:
        table = parse_prometheus(payload, what=f"{self.engine} metrics")
        return self.sample_from(table, version=version)


_VERSION = re.compile(r"^\s*v?(\d+)\.(\d+)")


def version_tuple(version: str | None) -> tuple[int, int] | None:
    """(major, minor) from "0.11.0", "v0.9.2rc1", "0.10.1+cu128"; None if unknown."""
    if not version:
        return None
    match = _VERSION.match(version)
    return (int(match[1]), int(match[2])) if match else None


def _vllm(version: str | None) -> PromDialect:
    v = version_tuple(version)
    kv_new, kv_old = "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"
    itl_new, itl_old = "vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"
    # 0.9 renamed the KV gauge (old one hidden in 0.10); 0.11 renamed the ITL histogram.
    kv: Names
    itl: Names
    if v is None:
        kv, itl = (kv_new, kv_old), (itl_new, itl_old)
    else:
        kv = (kv_old,) if v < (0, 9) else (kv_new,) if v >= (0, 10) else (kv_new, kv_old)
        itl = (itl_new,) if v >= (0, 11) else (itl_old,)
    return PromDialect(
        engine="vllm",
        kv_usage=kv,
        running=("vllm:num_requests_running",),
        waiting=("vllm:num_requests_waiting",),
        prompt_tokens=("vllm:prompt_tokens_total",),
        generation_tokens=("vllm:generation_tokens_total",),
        preemptions=("vllm:num_preemptions_total",),
        prefix_hit_rate=("vllm:gpu_prefix_cache_hit_rate",),  # V0 only
        prefix_hits=("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total"),
        prefix_queries=("vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total"),
        ttft=("vllm:time_to_first_token_seconds",),
        itl=itl,
        e2e=("vllm:e2e_request_latency_seconds",),
    )


def _sglang(version: str | None) -> PromDialect:
    return PromDialect(
        engine="sglang",
        kv_usage=("sglang:token_usage",),
        running=("sglang:num_running_reqs",),
        waiting=("sglang:num_queue_reqs",),
        prompt_tokens=("sglang:prompt_tokens_total",),
        generation_tokens=("sglang:generation_tokens_total",),
        preemptions=("sglang:num_retracted_reqs_total", "sglang:num_retracted_reqs"),
        prefix_hit_rate=("sglang:cache_hit_rate",),
        ttft=("sglang:time_to_first_token_seconds",),
        # current collector.py names ITL properly; older releases called it TPOT
        itl=("sglang:inter_token_latency_seconds", "sglang:time_per_output_token_seconds"),
        e2e=("sglang:e2e_request_latency_seconds",),
    )


def _tgi(version: str | None) -> PromDialect:
    # metrics-exporter-prometheus renders counters without "_total".  TGI has no
    # KV gauge and no TTFT histogram; its per-request mean time per token is the
    # closest it comes to inter-token latency.
    return PromDialect(
        engine="tgi",
        running=("tgi_batch_current_size",),
        waiting=("tgi_queue_size",),
        prompt_tokens=("tgi_request_input_length_sum",),
        generation_tokens=("tgi_request_generated_tokens_sum",),
        itl=("tgi_request_mean_time_per_token_duration",),
        e2e=("tgi_request_duration",),
    )


def _llamacpp(version: str | None) -> PromDialect:
    # The KV gauges exist only in builds before May 2025 (PR #13660); newer
    # builds need the /slots estimate (engines.llamacpp_slots).
    return PromDialect(
        engine="llamacpp",
        kv_usage=("llamacpp:kv_cache_usage_ratio",),
        running=("llamacpp:requests_processing",),
        waiting=("llamacpp:requests_deferred",),
        prompt_tokens=("llamacpp:prompt_tokens_total",),
        generation_tokens=("llamacpp:tokens_predicted_total",),
        prefix_hits=("llamacpp:prompt_tokens_cached_total",),
        prefix_misses=("llamacpp:prompt_tokens_total",),
    )


def _lmdeploy(version: str | None) -> PromDialect:
    return PromDialect(
        engine="lmdeploy",
        kv_usage=("lmdeploy:gpu_cache_usage_perc",),
        running=("lmdeploy:num_requests_running",),
        waiting=("lmdeploy:num_requests_waiting",),
        prompt_tokens=("lmdeploy:prompt_tokens_total",),
        generation_tokens=("lmdeploy:generation_tokens_total",),
        prefix_hit_rate=("lmdeploy:prefix_cache_hit_rate",),
        ttft=("lmdeploy:time_to_first_token_seconds",),
        itl=("lmdeploy:iter_token_latency", "lmdeploy:inter_token_latency_seconds"),
        e2e=("lmdeploy:e2e_request_latency_seconds",),
    )


def _trtllm(version: str | None) -> PromDialect:
    # 1.1-era collector had no prefix; 2026 builds prefix everything "trtllm_".
    def both(name: str) -> Names:
        return (f"trtllm_{name}", name)

    return PromDialect(
        engine="trtllm",
        kv_usage=("trtllm_kv_cache_utilization",),
        running=("trtllm_num_requests_running",),
        waiting=("trtllm_num_requests_waiting",),
        prompt_tokens=("trtllm_prompt_tokens_total",),
        generation_tokens=("trtllm_generation_tokens_total",),
        prefix_hit_rate=("trtllm_kv_cache_hit_rate",),
        ttft=both("time_to_first_token_seconds"),
        itl=both("time_per_output_token_seconds"),
        e2e=both("e2e_request_latency_seconds"),
    )


_FACTORIES = {
    "vllm": _vllm,
    "sglang": _sglang,
    "tgi": _tgi,
    "llamacpp": _llamacpp,
    "lmdeploy": _lmdeploy,
    "trtllm": _trtllm,
}


def prom_dialect(engine: str, version: str | None = None) -> PromDialect:
    try:
        factory = _FACTORIES[engine]
    except KeyError:
        raise KeyError(
            f"no Prometheus dialect for {engine!r}; known: {sorted(_FACTORIES)}"
        ) from None
    return factory(version)
