"""Each imitated dialect's metrics: its own names, labels and JSON shapes.

An engine's spec names its dialect (``EngineSpec.dialect``); a renderer here is
picked by that name, so an engine speaking a known dialect is imitated as is.

Names and HELP strings follow the engines' sources as recorded in
``tests/fixtures/engines`` and ``tests/fixtures/llamacpp-live``.  Every
Prometheus text also carries ``infer_top_simulated 1`` so no scrape of a
simulator can pass for a real engine.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from sim.metrics import Histogram, SimMetrics
from sim.profile import SimProfile
from sim.scheduler import Scheduler, SchedulerCounters

SIMULATED_SERIES = (
    "# HELP infer_top_simulated 1 when this endpoint is the infer-top engine simulator.\n"
    "# TYPE infer_top_simulated gauge\n"
    "infer_top_simulated 1\n"
)
_PROMPT_HELP = "Number of prefill tokens processed."
_GENERATION_HELP = "Number of generation tokens processed."


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _num(value: float) -> str:
    if value == float("inf"):
        return "+Inf"
    return repr(float(value)) if isinstance(value, float) else str(value)


class _Text:
    """A Prometheus text-format writer with fixed base labels."""

    def __init__(self, labels: Mapping[str, str], *, with_help: bool = True) -> None:
        self.labels = dict(labels)
        self.with_help = with_help
        self.lines: list[str] = []

    def _labels(self, extra: Mapping[str, str] | None = None) -> str:
        merged = {**self.labels, **(extra or {})}
        if not merged:
            return ""
        body = ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(merged.items()))
        return "{" + body + "}"

    def _head(self, name: str, kind: str, help_text: str) -> None:
        if self.with_help:
            self.lines.append(f"# HELP {name} {help_text}")
        self.lines.append(f"# TYPE {name} {kind}")

    def gauge(self, name: str, help_text: str, value: float) -> None:
        self._head(name, "gauge", help_text)
        self.lines.append(f"{name}{self._labels()} {_num(value)}")

    def counter(
        self, name: str, help_text: str, values: float | Mapping[tuple[str, str], float]
    ) -> None:
        """``values`` is one value, or {(label, label value): value} for one extra label."""
        self._head(name, "counter", help_text)
        if isinstance(values, Mapping):
            for (key, val), v in values.items():
                self.lines.append(f"{name}{self._labels({key: val})} {_num(v)}")
        else:
            self.lines.append(f"{name}{self._labels()} {_num(values)}")

    def token_counters(self, prefix: str, c: SchedulerCounters) -> None:
        """Prompt and generation token totals, under vLLM's names and HELP, which
        SGLang, TensorRT-LLM and LMDeploy keep (with their own prefix)."""
        self.counter(f"{prefix}prompt_tokens_total", _PROMPT_HELP, c.prompt_tokens)
        self.counter(f"{prefix}generation_tokens_total", _GENERATION_HELP, c.generation_tokens)

    def histogram(self, name: str, help_text: str, h: Histogram) -> None:
        self._head(name, "histogram", help_text)
        for bound, cum in h.cumulative():
            self.lines.append(f"{name}_bucket{self._labels({'le': _num(bound)})} {_num(cum)}")
        self.lines.append(f"{name}_sum{self._labels()} {_num(h.total)}")
        self.lines.append(f"{name}_count{self._labels()} {_num(h.count)}")

    def render(self) -> str:
        return "\n".join(self.lines) + "\n" + SIMULATED_SERIES


def _hit_rate(s: Scheduler) -> float:
    c = s.counters
    return c.prefix_hit_tokens / c.prefix_queries_tokens if c.prefix_queries_tokens else 0.0


_REASONS = ("stop", "length", "abort")


def _vllm(p: SimProfile, s: Scheduler, m: SimMetrics) -> str:
    t = _Text({"engine": "0", "model_name": p.model})
    c = s.counters
    t.gauge(
        "vllm:num_requests_running", "Number of requests in model execution batches.", s.num_running
    )
    t.gauge(
        "vllm:num_requests_waiting", "Number of requests waiting to be processed.", s.num_waiting
    )
    t.gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", s.kv_usage)
    t.counter(
        "vllm:prefix_cache_queries_total",
        "Prefix cache queries, in terms of number of queried tokens.",
        c.prefix_queries_tokens,
    )
    t.counter(
        "vllm:prefix_cache_hits_total",
        "Prefix cache hits, in terms of number of cached tokens.",
        c.prefix_hit_tokens,
    )
    t.counter(
        "vllm:num_preemptions_total",
        "Cumulative number of preemption from the engine.",
        c.preemptions,
    )
    t.token_counters("vllm:", c)
    t.counter(
        "vllm:request_success_total",
        "Count of successfully processed requests.",
        {("finished_reason", r): m.finished_by_reason[r] for r in _REASONS},
    )
    t.histogram(
        "vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", m.ttft
    )
    t.histogram(
        "vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", m.itl
    )
    t.histogram(
        "vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", m.e2e
    )
    t.histogram(
        "vllm:request_queue_time_seconds",
        "Histogram of time spent in WAITING phase for request.",
        m.queue,
    )
    t._head("vllm:cache_config_info", "gauge", "Information of the LLMEngine CacheConfig")
    info = t._labels(
        {
            "block_size": str(p.kv_block_size_tokens),
            "cache_dtype": "auto",
            "enable_prefix_caching": str(p.prefix_caching),
            "num_gpu_blocks": str(p.kv_blocks),
        }
    )
    t.lines.append(f"vllm:cache_config_info{info} 1.0")
    return t.render()


def _sglang(p: SimProfile, s: Scheduler, m: SimMetrics) -> str:
    t = _Text({"model_name": p.model})
    c = s.counters
    busy = c.busy_s
    t.token_counters("sglang:", c)
    t.gauge("sglang:token_usage", "The token usage", s.kv_usage)
    t.gauge("sglang:cache_hit_rate", "The cache hit rate", _hit_rate(s))
    t.gauge("sglang:num_running_reqs", "The number of running requests", s.num_running)
    t.gauge(
        "sglang:num_used_tokens",
        "The number of used tokens",
        s.kv_used_blocks * p.kv_block_size_tokens,
    )
    t.gauge(
        "sglang:gen_throughput",
        "The generate throughput (token/s)",
        c.generation_tokens / busy if busy else 0.0,
    )
    t.gauge("sglang:num_queue_reqs", "The number of requests in the waiting queue", s.num_waiting)
    t.histogram(
        "sglang:time_to_first_token_seconds", "Histogram of time to first token in seconds.", m.ttft
    )
    t.histogram(
        "sglang:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", m.itl
    )
    t.histogram(
        "sglang:e2e_request_latency_seconds",
        "Histogram of End-to-end request latency in seconds",
        m.e2e,
    )
    return t.render()


def _tgi(p: SimProfile, s: Scheduler, m: SimMetrics) -> str:
    # Rust metrics-exporter-prometheus: no HELP lines, counters without _total.
    t = _Text({}, with_help=False)
    ok = sum(v for k, v in m.finished_by_reason.items() if k != "abort")
    t.counter("tgi_request_count", "", m.requests_received)
    t.counter("tgi_request_success", "", ok)
    t.gauge("tgi_queue_size", "", s.num_waiting)
    t.gauge("tgi_batch_current_size", "", s.num_running)
    t.gauge("tgi_batch_current_max_tokens", "", s.kv_tokens)
    t.gauge("tgi_batch_max_total_tokens", "", p.kv_blocks * p.kv_block_size_tokens)
    t.counter(
        "tgi_batch_inference_count",
        "",
        {("method", "prefill"): s.counters.prefill_steps, ("method", "decode"): s.counters.steps},
    )
    t.histogram("tgi_request_duration", "", m.e2e)
    t.histogram("tgi_request_queue_duration", "", m.queue)
    t.histogram("tgi_request_mean_time_per_token_duration", "", m.tpot)
    t.histogram("tgi_request_input_length", "", m.prompt_len)
    t.histogram("tgi_request_generated_tokens", "", m.generated_len)
    return t.render()


def _llamacpp(p: SimProfile, s: Scheduler, m: SimMetrics) -> str:
    t = _Text({})
    steps = s.counters.steps
    t.counter(
        "llamacpp:prompt_tokens_total",
        "Number of prompt tokens processed, excluding cached tokens",
        m.ended_prompt_tokens,
    )
    t.counter(
        "llamacpp:prompt_tokens_cached_total",
        "Number of prompt tokens reused from the cache",
        m.ended_cached_tokens,
    )
    t.counter(
        "llamacpp:prompt_seconds_total", "Total time spent processing prompts", m.ended_prompt_s
    )
    t.counter(
        "llamacpp:tokens_predicted_total",
        "Number of generation tokens processed",
        m.ended_generated_tokens,
    )
    t.counter(
        "llamacpp:tokens_predicted_seconds_total",
        "Total time spent generating tokens",
        m.ended_generation_s,
    )
    t.counter(
        "llamacpp:n_decode_total",
        "Total number of llama_decode() calls, excluding "
        "speculative decoding and multimodal decoding",
        steps,
    )
    t.counter(
        "llamacpp:n_tokens_max",
        "Largest observed sequence length (prompt + generation)",
        m.max_sequence_tokens,
    )
    t.counter(
        "llamacpp:spec_decode_num_draft_tokens_total",
        "Speculative: Total draft tokens generated",
        0,
    )
    t.counter(
        "llamacpp:spec_decode_num_accepted_tokens_total",
        "Speculative: Total draft tokens accepted by the target model",
        0,
    )
    t.counter(
        "llamacpp:spec_decode_num_drafts_total",
        "Speculative: Total speculative decoding verification steps",
        0,
    )
    t.gauge(
        "llamacpp:prompt_tokens_seconds",
        "Average prompt throughput in tokens/s",
        m.ended_prompt_tokens / m.ended_prompt_s if m.ended_prompt_s else 0.0,
    )
    t.gauge(
        "llamacpp:predicted_tokens_seconds",
        "Average generation throughput in tokens/s",
        m.ended_generated_tokens / m.ended_generation_s if m.ended_generation_s else 0.0,
    )
    t.gauge("llamacpp:requests_processing", "Number of requests processing", s.num_running)
    t.gauge("llamacpp:requests_deferred", "Number of requests deferred", s.num_waiting)
    t.gauge(
        "llamacpp:n_busy_slots_per_decode",
        "Average number of busy slots per llama_decode() call",
        m.batch_sum / steps if steps else 0.0,
    )
    return t.render()


def _trtllm(p: SimProfile, s: Scheduler, m: SimMetrics) -> str:
    t = _Text({"model_name": p.model, "engine_type": "trtllm"})
    c = s.counters
    bs = p.kv_block_size_tokens
    t.counter(
        "trtllm_request_success_total",
        "Count of successfully processed requests.",
        {("finished_reason", r): m.finished_by_reason[r] for r in ("stop", "length")},
    )
    t.histogram(
        "trtllm_e2e_request_latency_seconds",
        "Histogram of end to end request latency in seconds.",
        m.e2e,
    )
    t.histogram(
        "trtllm_time_to_first_token_seconds", "Histogram of time to first token in seconds.", m.ttft
    )
    t.histogram(
        "trtllm_time_per_output_token_seconds",
        "Histogram of time per output token in seconds.",
        m.tpot,
    )
    t.histogram(
        "trtllm_request_queue_time_seconds",
        "Histogram of time spent in WAITING phase for request.",
        m.queue,
    )
    t.token_counters("trtllm_", c)
    t.gauge("trtllm_kv_cache_utilization", "KV cache utilization (0-1).", s.kv_usage)
    t.gauge("trtllm_kv_cache_hit_rate", "KV cache reuse hit rate (0-1).", _hit_rate(s))
    t.gauge("trtllm_kv_cache_max_blocks", "Maximum number of KV cache blocks.", p.kv_blocks)
    t.gauge(
        "trtllm_kv_cache_free_blocks",
        "Number of free KV cache blocks.",
        p.kv_blocks - s.kv_used_blocks,
    )
    t.gauge("trtllm_kv_cache_used_blocks", "Number of used KV cache blocks.", s.kv_used_blocks)
    t.gauge("trtllm_kv_cache_tokens_per_block", "Tokens per KV cache block.", bs)
    t.gauge("trtllm_num_requests_running", "Number of requests running.", s.num_running)
    t.gauge("trtllm_num_requests_waiting", "Number of requests waiting.", s.num_waiting)
    t.counter(
        "trtllm_num_requests_completed_total",
        "Number of completed requests.",
        sum(m.finished_by_reason.values()),
    )
    return t.render()


def _lmdeploy(p: SimProfile, s: Scheduler, m: SimMetrics) -> str:
    t = _Text({"engine": "0", "model_name": p.model})
    c = s.counters
    t.gauge(
        "lmdeploy:num_requests_running",
        "Number of requests in model execution batches.",
        s.num_running,
    )
    t.gauge(
        "lmdeploy:num_requests_waiting",
        "Number of requests waiting to be processed.",
        s.num_waiting,
    )
    t.gauge(
        "lmdeploy:num_api_requests_waiting",
        "Number of requests waiting for free request handles.",
        0,
    )
    t.gauge(
        "lmdeploy:gpu_cache_usage_perc",
        "GPU KV-cache usage. 1 means 100 percent usage.",
        s.kv_usage,
    )
    t.gauge(
        "lmdeploy:prefix_cache_hit_rate",
        "Prefix-cache hit rate. 1 means 100 percent of queried prefix tokens hit.",
        _hit_rate(s),
    )
    t.token_counters("lmdeploy:", c)
    t.histogram(
        "lmdeploy:time_to_first_token_seconds",
        "Histogram of time to first token in seconds.",
        m.ttft,
    )
    t.histogram("lmdeploy:iter_token_latency", "Histogram of inter-token latency", m.itl)
    t.histogram(
        "lmdeploy:e2e_request_latency_seconds",
        "Histogram of end to end request latency in seconds.",
        m.e2e,
    )
    t.histogram(
        "lmdeploy:request_queue_time_seconds",
        "Histogram of time spent in WAITING phase for request.",
        m.queue,
    )
    return t.render()


PROMETHEUS_RENDERERS: dict[str, Callable[[SimProfile, Scheduler, SimMetrics], str]] = {
    "vllm": _vllm,
    "sglang": _sglang,
    "tgi": _tgi,
    "llamacpp": _llamacpp,
    "trtllm": _trtllm,
    "lmdeploy": _lmdeploy,
}
"""Ollama has no Prometheus endpoint (its /api/ps is ``introspect.ollama_ps``)."""
IMITATED = frozenset(PROMETHEUS_RENDERERS) | {"ollama"}
"""Every dialect the simulator can imitate."""


def prometheus_text(p: SimProfile, s: Scheduler, m: SimMetrics) -> str | None:
    render = PROMETHEUS_RENDERERS.get(p.spec.dialect)
    return None if render is None else render(p, s, m)
