"""vLLM's CPU build, the rig's second real engine, driven through a real agent (the
session's scenario, tests/rig/conftest.py): its telemetry while a small KV cache runs
full, its KV capacity beside the fit estimator's, swaps to and from llama.cpp with their
time, the same sweep on both engines side by side as the Compare screen and the export
show it, and a shared-prefix load with prefix caching off and on."""

from __future__ import annotations

import csv
import io
import itertools
from pathlib import Path

import pytest

from alerts import AlertEngine, FrameRules, parse_alert_config
from alerts.rules import FRAME_RULES
from control.compare_view import comparison_table
from control.exporting import export_comparison
from control.services import Services
from store import open_store
from tests.agents.test_server import swap_times

from .conftest import KV_BLOCKS, PREFIX_WORKLOAD, Scenario

pytestmark = pytest.mark.docker


def test_vllm_telemetry_shows_kv_queue_latency_and_preemptions_under_load(
    scenario: Scenario,
) -> None:
    assert {f.kind for f in scenario.vllm_frames} == {"vllm"}
    # the frames before the engine's first scrape after the swap carry no values yet
    frames = [f for f in scenario.vllm_frames if f.kv_cache_usage is not None]
    idle, last = frames[0], frames[-1]
    assert (idle.kv_cache_usage, idle.requests_running, idle.requests_waiting) == (0, 0, 0)
    assert idle.preemptions_total == 0
    assert idle.ttft_p50_s is None and idle.itl_p50_s is None  # nothing measured yet: n/a
    # 8 streams of ~200 tokens each against 20 blocks of 32 tokens: the cache runs full,
    # requests queue, and vLLM preempts running ones to make room.
    assert max(f.kv_cache_usage or 0 for f in frames) >= 0.5, scenario.timeline()
    assert max(f.requests_running or 0 for f in frames) >= 2, scenario.timeline()
    # a queue lasts a moment (preempted requests wait for blocks) and frames come 4 a second,
    # so it is looked for over every load vLLM served: the sweep and both shared-prefix loads
    loads = (*frames, *scenario.cached_frames)
    assert max(f.requests_waiting or 0 for f in loads) >= 1, [f.requests_waiting for f in loads]
    assert max(f.generation_tok_s or 0 for f in frames) > 0
    assert last.preemptions_total is not None and last.preemptions_total > 0
    # TTFT and ITL medians from vLLM's own histograms; queueing makes the first token
    # wait longer than the gap between two tokens.
    assert last.ttft_p50_s is not None and last.itl_p50_s is not None
    assert 0 < last.itl_p50_s < last.ttft_p50_s
    assert (last.kv_cache_usage, last.requests_running, last.requests_waiting) == (0, 0, 0)


def test_swaps_between_llamacpp_and_vllm_keep_the_port_and_say_their_time(
    scenario: Scenario,
) -> None:
    swaps = (
        (scenario.to_vllm, "llamacpp", "vllm"),
        (scenario.to_vllm_cached, "vllm", "vllm"),  # prefix caching off -> on: a restart
        (scenario.to_llama, "vllm", "llamacpp"),
    )
    took_s = []
    for swap, old, new in swaps:
        engine = swap.engine
        assert (engine.kind, engine.health) == (new, "healthy")
        assert engine.port == scenario.to_vllm.engine.port  # clients keep their URL
        kinds_from, kinds_to, took, down, up = swap_times(engine.message)
        assert (kinds_from, kinds_to) == (old, new)
        assert 0 < down <= took <= swap.wall_s + 0.05 and up > 0  # the message rounds to 0.1 s
        took_s.append(took)
    swapped = [e.message for e in scenario.events if e.kind == "swapped"]
    assert len(swapped) == len(swaps)
    for (swap, _, _), message in zip(swaps, swapped, strict=True):
        assert swap.engine.message in message
    # vLLM loads torch and profiles its engine first: its swaps are the slow ones
    assert min(took_s[:2]) > took_s[2]


def test_the_same_sweep_on_both_engines_compares_side_by_side(
    scenario: Scenario, tmp_path: Path
) -> None:
    ids = [scenario.llama_run_id, scenario.vllm_run_id]
    store = open_store(scenario.db)
    try:
        comparison = store.compare(ids)
        table = comparison_table(comparison)
        services = Services(store=store, exports_dir=tmp_path)
        exported = export_comparison(services, ids, "csv").read_text()
        markdown = export_comparison(services, ids, "md").read_text()
    finally:
        store.close()
    # The Compare screen's table: one row per engine, tok/s at both concurrencies.
    assert table.columns[:3] == ("Engine", "@2", "@8")
    assert [run_id for run_id, _ in table.rows] == ids
    assert [run.engine_kind for run in comparison.runs] == ["llamacpp", "vllm"]
    assert {run.deployment_id for run in comparison.runs} == {scenario.to_vllm.engine.id}
    labels = [cells[0] for _, cells in table.rows]
    assert labels[0].startswith("llamacpp") and labels[1].startswith("vllm"), labels
    for _, cells in table.rows:
        assert float(cells[1].replace(",", "")) > 0 and float(cells[2].replace(",", "")) > 0
        assert cells[5] == "0.0"  # no failed request at 8 concurrent
    # The export: both engines at both levels, from the same node and deployment.
    levels = list(csv.DictReader(io.StringIO(exported)))
    assert sorted((r["engine_kind"], r["concurrency"]) for r in levels) == [
        ("llamacpp", "2"), ("llamacpp", "8"), ("vllm", "2"), ("vllm", "8"),
    ]  # fmt: skip
    assert "llamacpp" in markdown and "vllm" in markdown


def test_kv_capacity_vllm_reports_is_stored_beside_the_estimate(scenario: Scenario) -> None:
    kv = scenario.to_vllm.engine.kv_capacity  # the agent's engine info, as the TUI shows it
    assert kv is not None
    # vllm:cache_config_info: --num-gpu-blocks-override 20 blocks of 32 tokens
    assert (kv.reported_tokens, kv.source) == (KV_BLOCKS * 32, "/metrics")
    # the CPU build's KV pool is its own setting, not GPU memory: no estimate, and why
    assert kv.estimated_tokens is None and kv.difference_tokens is None
    assert kv.estimate_basis == (
        "the engine runs on the CPU: the fit estimator sizes KV in GPU memory only"
    )
    store = open_store(scenario.db)
    try:
        profile = store.get_run(scenario.vllm_run_id).profile
    finally:
        store.close()
    assert profile["engine"]["kv_capacity"] == {
        "reported_tokens": 640, "estimated_tokens": None, "difference_tokens": None,
        "source": "/metrics", "estimate_basis": kv.estimate_basis,
    }  # fmt: skip


def test_prefix_cache_hits_show_with_caching_on_and_stay_none_with_it_off(
    scenario: Scenario, tmp_path: Path
) -> None:
    off, on = scenario.off_counters, scenario.on_counters
    # the typed option reached the engine: its own cache config says so
    assert (off.enabled, on.enabled) == ("False", "True")
    # off: vLLM looks nothing up, through the sweep and the shared-prefix load alike,
    # so its telemetry has no hit rate to show (n/a, not a made-up 0)
    assert (off.hits_tokens, off.queries_tokens) == (0, 0)
    assert [f.prefix_cache_hit_rate for f in scenario.vllm_frames] == [None] * len(
        scenario.vllm_frames
    )
    # on: after the first request, each of the other three finds the shared prefix's
    # whole blocks of 32 tokens in the cache (7 for 230 tokens and the template's head)
    blocks = PREFIX_WORKLOAD.shared_prefix_len // 32
    assert on.hits_tokens == 3 * blocks * 32 and on.queries_tokens is not None
    frames = [f for f in scenario.cached_frames if f.kv_cache_usage is not None]
    assert frames[0].prefix_cache_hit_rate is None  # a fresh engine: nothing looked up yet
    # the agent's rate is the engine's counters since its start: hits / queried tokens
    assert frames[-1].prefix_cache_hit_rate == pytest.approx(on.hits_tokens / on.queries_tokens)
    assert 0.5 < on.hits_tokens / on.queries_tokens < 1

    ids = [scenario.prefix_off_run_id, scenario.prefix_on_run_id]
    store = open_store(scenario.db)
    try:
        table = comparison_table(store.compare(ids))
        services = Services(store=store, exports_dir=tmp_path)
        exported = export_comparison(services, ids, "csv").read_text()
        markdown = export_comparison(services, ids, "md").read_text()
    finally:
        store.close()
    assert table.columns[:2] == ("Engine", "@1")
    assert [run_id for run_id, _ in table.rows] == ids
    # each run by its name and its engine's options, on screen and in the export
    labels = [
        "vllm /models/tiny (prefix caching off, max seqs 16, ctx 512)",
        "vllm /models/tiny (prefix caching on, max seqs 16, ctx 512)",
    ]
    assert [cells[0] for _, cells in table.rows] == labels
    for _, cells in table.rows:
        assert float(cells[1].replace(",", "")) > 0 and cells[4] == "0.0"
    rows = list(csv.DictReader(io.StringIO(exported)))
    assert [(r["run_id"], r["label"]) for r in rows] == list(zip(ids, labels, strict=True))
    assert all(r["label"] in markdown for r in rows)


def test_a_full_kv_cache_on_the_real_engine_raises_the_alert_and_clears_after_the_load(
    scenario: Scenario,
) -> None:
    """The control plane's alert rules over the node's real frames: vLLM's 20-block cache
    fills under the 8-stream sweep and empties in the light shared-prefix load after it.
    The hold-down is 0.2 s here (30 s by default: this sweep keeps the cache full for a
    few frames, not half a minute) and the threshold 80 % of the fill two frames in a row
    reached, in a sweep that filled it well."""
    fills = [f.engines[0].kv_cache_usage or 0.0 for f in scenario.vllm_node_frames]
    assert max(fills) >= 0.5, scenario.timeline()  # the sweep filled it (the telemetry test)
    # the fill two frames in a row reached (a hold-down needs it to last: on a busy machine
    # the peak can be one frame's)
    held = max(min(a, b) for a, b in itertools.pairwise(fills))
    hold = {"hold_s": 0.2, "threshold": round(0.8 * held, 3)}
    config = parse_alert_config({"rules": {"kv_cache_full": hold}})
    rules, engine = FrameRules(config), AlertEngine(config)
    changes = [
        change
        for frame in scenario.vllm_node_frames
        for change in engine.update(frame.node, FRAME_RULES, rules.observe(frame), frame.ts)
        if change.alert.rule == "kv_cache_full"
    ]
    kinds = [c.kind for c in changes]
    seen = [(round(f.ts, 2), f.engines[0].kv_cache_usage) for f in scenario.vllm_node_frames]
    assert kinds[:2] == ["raised", "cleared"], (kinds, seen)
    raised, cleared = changes[0].alert, changes[1].alert
    threshold = config.rule("kv_cache_full").threshold
    assert threshold is not None and raised.value is not None and raised.value >= threshold
    assert "KV cache" in raised.message and raised.engine_id == scenario.to_vllm.engine.id
    # cleared once the cache had stayed below the threshold for the hold-down
    assert cleared.cleared_at is not None
    frames = scenario.vllm_node_frames
    last_full = max(
        f.ts
        for f in frames
        if f.ts < cleared.cleared_at and (f.engines[0].kv_cache_usage or 0) >= threshold
    )
    assert cleared.cleared_at >= last_full + 0.2
