"""Prometheus exposition of the latest frame, so Grafana can scrape agents directly.

A custom collector reads the sampler's latest frame at scrape time: nothing is
sampled twice and the values are exactly what the TUI sees.  Beside the frame: each
engine's own TTFT and ITL histograms (as the engine counts them, so a dashboard takes any
quantile over any window) and the agent's scrapes of its engines (durations, errors),
from the scraper's ``ScrapeStats``.  ``deploy/grafana/infer-top.json`` charts these.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector, CollectorRegistry

from agents.scrape_stats import SCRAPE_BUCKETS_S, ScrapeStats
from engines.sample import HistogramSummary
from telemetry import TelemetryFrame

_GPU_GAUGES = (
    ("util_pct", "infer_gpu_utilization_percent", "GPU utilisation, percent"),
    ("mem_used_bytes", "infer_gpu_memory_used_bytes", "GPU memory in use, bytes"),
    ("mem_total_bytes", "infer_gpu_memory_total_bytes", "GPU memory, bytes"),
    ("power_w", "infer_gpu_power_watts", "GPU power draw, watts"),
    ("temp_c", "infer_gpu_temperature_celsius", "GPU temperature, degrees Celsius"),
    ("sm_clock_mhz", "infer_gpu_sm_clock_mhz", "SM clock, MHz"),
    ("throttle_reasons", "infer_gpu_clocks_event_reasons", "NVML clocks-event-reasons bitmask"),
)
_ENGINE_GAUGES = (
    ("kv_cache_usage", "infer_engine_kv_cache_usage_ratio", "KV cache in use, 0-1"),
    ("requests_running", "infer_engine_requests_running", "Requests being decoded"),
    ("requests_waiting", "infer_engine_requests_waiting", "Requests queued"),
    ("prompt_tok_s", "infer_engine_prompt_tokens_per_second", "Prompt tokens per second"),
    (
        "generation_tok_s",
        "infer_engine_generation_tokens_per_second",
        "Generated tokens per second",
    ),
    ("ttft_p50_s", "infer_engine_ttft_p50_seconds", "Median time to first token"),
    ("itl_p50_s", "infer_engine_itl_p50_seconds", "Median inter-token latency"),
)
_GPU_LABELS = ["node", "gpu", "name"]
_PROCESS_LABELS = ["node", "gpu", "pid", "engine"]
"""``engine``: the owning deployment's id, empty for a process no engine of the agent
owns (the screens' "other": a deployment may itself be called "other")."""
_ENGINE_LABELS = ["node", "engine", "kind"]
M = TypeVar("M", GaugeMetricFamily, CounterMetricFamily)


class FrameCollector(Collector):
    def __init__(
        self, latest: Callable[[], TelemetryFrame | None], scrapes: ScrapeStats | None = None
    ) -> None:
        self.latest = latest
        self.scrapes = scrapes

    def collect(self) -> Iterator[Metric]:
        frame = self.latest()
        if frame is None:
            return
        node = frame.node
        gpus = [([node, str(gpu.index), gpu.name], gpu) for gpu in frame.gpus]
        engines = [([node, eng.id, eng.kind], eng) for eng in frame.engines]
        for attr, name, doc in _GPU_GAUGES:
            family = GaugeMetricFamily(name, doc, labels=_GPU_LABELS)
            yield _filled(family, ((key, getattr(gpu, attr)) for key, gpu in gpus))
        energy = CounterMetricFamily(
            "infer_gpu_energy_joules", "GPU energy since driver load", labels=_GPU_LABELS
        )
        yield _filled(energy, ((key, gpu.energy_j) for key, gpu in gpus))
        procs = GaugeMetricFamily(
            "infer_gpu_process_memory_used_bytes",
            "GPU memory a process holds, bytes (NVML's per-process account)",
            labels=_PROCESS_LABELS,
        )
        held = (
            ([node, str(gpu.index), str(p.pid), p.engine or ""], p.mem_used_bytes)
            for gpu in frame.gpus
            for p in gpu.processes
        )
        yield _filled(procs, held)
        for attr, name, doc in _ENGINE_GAUGES:
            family = GaugeMetricFamily(name, doc, labels=_ENGINE_LABELS)
            yield _filled(family, ((key, getattr(eng, attr)) for key, eng in engines))
        up = GaugeMetricFamily(
            "infer_engine_healthy", "1 when the engine answers healthy", labels=_ENGINE_LABELS
        )
        yield _filled(up, ((key, 1.0 if eng.health == "healthy" else 0.0) for key, eng in engines))
        if self.scrapes is not None:
            yield from _scrape_families(node, self.scrapes)


def _scrape_families(node: str, stats: ScrapeStats) -> Iterator[Metric]:
    ttft = HistogramMetricFamily(
        "infer_engine_ttft_seconds",
        "Time to first token as the engine counts it since it started",
        labels=_ENGINE_LABELS,
    )
    itl = HistogramMetricFamily(
        "infer_engine_itl_seconds",
        "Inter-token latency as the engine counts it since it started",
        labels=_ENGINE_LABELS,
    )
    took = HistogramMetricFamily(
        "infer_agent_engine_scrape_duration_seconds",
        "How long the agent's scrape of an engine's metrics took",
        labels=_ENGINE_LABELS,
    )
    errors = CounterMetricFamily(
        "infer_agent_engine_scrape_errors",
        "Scrapes of a ready engine that failed (no page, bad page, past the deadline)",
        labels=_ENGINE_LABELS,
    )
    bounds = [*(_le(b) for b in SCRAPE_BUCKETS_S), "+Inf"]
    for e in stats.engines():
        labels = [node, e.engine_id, e.kind]
        took.add_metric(
            labels, list(zip(bounds, map(float, e.bucket_counts), strict=True)), e.sum_s
        )
        errors.add_metric(labels, float(e.errors))
        for family, hist in ((ttft, e.ttft), (itl, e.itl)):
            if hist is not None:
                family.add_metric(labels, _buckets(hist), hist.sum_s)
    yield from (ttft, itl, took, errors)


def _le(bound: float) -> str:
    """A bucket's upper bound as the exposition writes it ("0.005", "1.0")."""
    return repr(float(bound))


def _buckets(hist: HistogramSummary) -> list[tuple[str, float]]:
    """The engine's cumulative buckets, +Inf last (its count, where the page left it out)."""
    out = [(_le(bound), float(n)) for bound, n in hist.buckets if bound != float("inf")]
    return [*out, ("+Inf", float(hist.count))]


def _filled(family: M, samples: Iterable[tuple[list[str], float | None]]) -> M:
    for labels, value in samples:
        if value is not None:  # n/a stays absent, never 0
            family.add_metric(labels, float(value))
    return family


def make_registry(
    latest: Callable[[], TelemetryFrame | None], scrapes: ScrapeStats | None = None
) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(FrameCollector(latest, scrapes))
    return registry
