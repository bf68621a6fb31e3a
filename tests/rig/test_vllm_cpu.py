"""vLLM's CPU build, the rig's second real engine, driven through a real agent (the
session's scenario, tests/rig/conftest.py): its telemetry while a small KV cache runs
full, swaps to and from llama.cpp with their time, and the same sweep on both engines
side by side as the Compare screen and the export show it."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest

from control.compare_view import comparison_table
from control.exporting import export_comparison
from control.services import Services
from store import open_store
from tests.agents.test_server import swap_times

from .conftest import Scenario

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
    assert max(f.kv_cache_usage or 0 for f in frames) >= 0.5
    assert max(f.requests_running or 0 for f in frames) >= 2
    assert max(f.requests_waiting or 0 for f in frames) >= 1
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
    took_s = {}
    for swap, old, new in (
        (scenario.to_vllm, "llamacpp", "vllm"),
        (scenario.to_llama, "vllm", "llamacpp"),
    ):
        engine = swap.engine
        assert (engine.kind, engine.health) == (new, "healthy")
        assert engine.port == scenario.to_vllm.engine.port  # clients keep their URL
        kinds_from, kinds_to, took, down, up = swap_times(engine.message)
        assert (kinds_from, kinds_to) == (old, new)
        assert 0 < down <= took <= swap.wall_s + 0.05 and up > 0  # the message rounds to 0.1 s
        took_s[new] = took
    swapped = [e.message for e in scenario.events if e.kind == "swapped"]
    assert len(swapped) == 2
    assert scenario.to_vllm.engine.message in swapped[0]
    assert scenario.to_llama.engine.message in swapped[1]
    # vLLM loads torch and profiles its engine first: its swap is the slow one
    assert took_s["vllm"] > took_s["llamacpp"]


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
