"""What a shareable report shows, read from the store: each run's setup, every level's
figures and cost, the alerts raised while it ran, and the seed-style headline table.

``control.report_html`` draws it; nothing here formats.  Every figure is the store's own
(the level summaries, energy over the level's window from ``Store.compare``), so the
report's table equals ``infer-top runs compare``'s.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from alerts import Alert
from control.cost import HourlyPrice, LevelCost, Prices, comparison_costs, hourly_price
from engines.catalog.options import options_text
from runs.records import LevelSummary, failures_text, level_name
from store import Store
from store.models import Comparison, ComparisonRow, RunInfo

HEADLINE_CONCURRENCY = 64
"""The seed's table: output tok/s per engine at 64 concurrent streams."""


@dataclass(frozen=True, slots=True)
class ReportLevel:
    row: ComparisonRow
    """The level as compare gives it (energy from the GPU telemetry over its window)."""
    summary: LevelSummary
    cost: LevelCost

    @property
    def name(self) -> str:
        return level_name(self.summary)


@dataclass(frozen=True, slots=True)
class ReportRun:
    info: RunInfo
    label: str
    levels: tuple[ReportLevel, ...]
    alerts: tuple[Alert, ...]
    hourly: HourlyPrice | None
    gpus: tuple[int, ...] | None

    @property
    def setup(self) -> tuple[tuple[str, str], ...]:
        """(what, value) lines: engine, version, model, node and GPUs, flags, workload."""
        info = self.info
        target = info.profile.get("target")
        model = target.get("model") if isinstance(target, dict) else None
        versions = ", ".join(f"{k} {v}" for k, v in sorted(info.software_versions.items()))
        gpus = "n/a" if self.gpus is None else ", ".join(str(g) for g in self.gpus)
        spec = info.profile.get("spec")
        return (
            ("engine", info.engine_kind or "n/a"),
            ("version", versions or "n/a"),
            ("model", str(model or "n/a")),
            ("node, GPUs", f"{info.node or 'n/a'}, GPUs {gpus}"),
            ("start options", options_text(info.engine_options) or "defaults"),
            ("workload", _plain(info.workload)),
            ("load", _plain(spec) if isinstance(spec, dict) else "n/a"),
            ("status", info.status + (f": {info.status_reason}" if info.status_reason else "")),
            ("source", "SIMULATED engine, not a measurement" if info.simulated else "measured"),
            ("price", self.hourly.basis if self.hourly else "no price configured"),
        )


@dataclass(frozen=True, slots=True)
class Headline:
    concurrency: int | None
    """64 where every run has it, else the highest level all runs share."""
    rows: tuple[tuple[ReportRun, ReportLevel | None], ...]


@dataclass(frozen=True, slots=True)
class Report:
    runs: tuple[ReportRun, ...]
    headline: Headline
    prices: Prices
    warnings: tuple[str, ...]
    made_at: float

    @property
    def simulated(self) -> bool:
        return any(r.info.simulated for r in self.runs)


def _plain(value: Mapping[str, object]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(value.items()) if v not in (None, "", {}, []))


def _run_alerts(store: Store, run: RunInfo) -> tuple[Alert, ...]:
    """Alerts linked to the run, and those on its node raised while it ran."""
    linked = {a.id: a for a in store.list_alerts(run_id=run.run_id)}
    end = run.finished_at or time.time()
    if run.node:
        for a in store.list_alerts(since=run.created_at):
            if a.node == run.node and run.created_at <= a.raised_at <= end:
                linked.setdefault(a.id, a)
    return tuple(sorted(linked.values(), key=lambda a: a.raised_at))


def _headline(runs: Sequence[ReportRun]) -> Headline:
    closed = [{lv.summary.concurrency: lv for lv in r.levels if lv.summary.request_rate is None}
              for r in runs]  # fmt: skip
    shared = set.intersection(*(set(c) for c in closed)) if closed else set()
    shared.discard(None)
    if HEADLINE_CONCURRENCY in shared:
        level: int | None = HEADLINE_CONCURRENCY
    else:
        level = max((c for c in shared if c is not None), default=None)
    return Headline(level, tuple((r, c.get(level)) for r, c in zip(runs, closed, strict=True)))


def build_report(store: Store, run_ids: Sequence[str], prices: Prices) -> Report:
    """Blocking reads: call from a thread where a loop runs."""
    return report_of(store, store.compare(list(run_ids)), prices)


def report_of(store: Store, comparison: Comparison, prices: Prices) -> Report:
    """The report of a comparison already read (the TUI's Compare screen has one).
    Blocking reads: call from a thread where a loop runs."""
    gpus = {r.run_id: store.engine_gpus(r) for r in comparison.runs}
    costs = comparison_costs(
        comparison, prices, {k: len(v) if v else None for k, v in gpus.items()}
    )
    runs = []
    for info in comparison.runs:
        summaries = {lv.summary.level_index: lv.summary for lv in store.levels(info.run_id)}
        levels = tuple(
            ReportLevel(row, summaries[row.level_index], costs[(info.run_id, row.level_index)])
            for row in comparison.rows
            if row.run_id == info.run_id
        )
        found = gpus[info.run_id]
        runs.append(
            ReportRun(
                info=info,
                label=comparison.label(info),
                levels=levels,
                alerts=_run_alerts(store, info),
                hourly=hourly_price(prices, info.node, len(found) if found else None),
                gpus=None if found is None else tuple(found),
            )
        )
    return Report(tuple(runs), _headline(runs), prices, comparison.warnings, time.time())


@dataclass(frozen=True, slots=True)
class Column:
    key: str
    header: str
    value: Callable[[ReportLevel], float | None]
    scale: float = 1.0
    digits: int = 1


def level_columns(currency: str) -> tuple[Column, ...]:
    """The per-level table's figures; ``value`` is the store's own number (seconds,
    fractions), ``scale`` turns it into the unit the header names."""
    return (
        Column("output_tok_s", "output tok/s", lambda lv: lv.row.output_tok_s),
        Column("request_s", "req/s", lambda lv: lv.row.request_s, digits=2),
        Column("ttft_p50", "TTFT p50 ms", lambda lv: lv.summary.ttft_s.p50, 1000),
        Column("ttft_p99", "TTFT p99 ms", lambda lv: lv.summary.ttft_s.p99, 1000),
        Column("itl_p50", "ITL p50 ms", lambda lv: lv.summary.itl_s.p50, 1000, 2),
        Column("itl_p99", "ITL p99 ms", lambda lv: lv.summary.itl_s.p99, 1000, 2),
        Column("tpot_p50", "TPOT p50 ms", lambda lv: lv.summary.tpot_s.p50, 1000, 2),
        Column("e2e_p99", "E2E p99 ms", lambda lv: lv.summary.e2e_s.p99, 1000),
        Column("failure_rate", "failed %", lambda lv: lv.row.failure_rate, 100),
        Column("goodput_req_s", "goodput req/s", lambda lv: lv.summary.goodput_req_s, digits=2),
        Column("gpu_util_pct", "GPU util %", lambda lv: lv.row.mean_gpu_util_pct),
        Column("gpu_mem_peak", "GPU mem peak GiB", lambda lv: lv.row.peak_gpu_mem_bytes, 2**-30),
        Column("kv_peak", "KV peak %", lambda lv: lv.row.kv_cache_peak, 100),
        Column("power_w", "power W", lambda lv: lv.row.mean_power_w),
        Column("tok_per_j", "tok/J", lambda lv: lv.row.tok_per_j, digits=2),
        Column(
            "cost_m_tok", f"{currency}/M out tok", lambda lv: lv.cost.per_m_output_tokens, digits=3
        ),
        Column("cost_m_req", f"{currency}/M req", lambda lv: lv.cost.per_m_requests, digits=2),
        Column(
            "energy_cost_m_tok",
            f"{currency} energy/M tok",
            lambda lv: lv.cost.energy_per_m_output_tokens,
            digits=4,
        ),
    )


def failures_words(level: ReportLevel) -> str:
    return failures_text(level.row.failures_by_kind) or "none"
