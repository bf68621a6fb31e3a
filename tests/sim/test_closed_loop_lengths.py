"""Closed-loop simulation with per-request lengths, drawn the load generator's way."""

from __future__ import annotations

import statistics

import pytest

from loadgen.workload import PromptSource, Workload, draw_lengths
from sim import Outcome, load_profile, simulate_closed_loop

VLLM = "h100-llama2-7b-vllm"
OLLAMA = "h100-llama3.1-8b-ollama"


def test_each_request_gets_its_own_lengths() -> None:
    lengths = [(100 + 10 * i, 20 + i) for i in range(12)]
    traces = simulate_closed_loop(
        load_profile(VLLM),
        concurrency=4,
        requests=12,
        prompt_tokens=512,
        output_tokens=256,
        lengths=lengths,
    )
    by_id = {t.request_id: t for t in traces}
    assert len(by_id) == 12
    for i, (prompt, output) in enumerate(lengths):
        trace = by_id[f"r{i}"]
        assert trace.outcome is Outcome.OK
        assert (trace.prompt_tokens, trace.output_tokens) == (prompt, output)


def test_fixed_lengths_given_explicitly_change_nothing() -> None:
    profile = load_profile(OLLAMA)
    fixed = simulate_closed_loop(
        profile, concurrency=8, requests=16, prompt_tokens=512, output_tokens=256
    )
    explicit = simulate_closed_loop(
        profile,
        concurrency=8,
        requests=16,
        prompt_tokens=1,
        output_tokens=1,
        lengths=[(512, 256)] * 16,
    )
    assert explicit == fixed


def test_varied_lengths_spread_the_queue_waits() -> None:
    """Identical requests in a closed loop all wait alike (TTFT p99 == p50); the
    load generator's range-ratio lengths make a queueing engine's tail show."""
    workload = Workload(input_len=512, output_len=256, range_ratio=0.25, seed=0)
    lengths = [draw_lengths(workload, n) for n in range(128)]

    def ttfts(lengths: list[tuple[int, int]] | None = None) -> list[float]:
        traces = simulate_closed_loop(
            load_profile(OLLAMA),
            concurrency=64,
            requests=128,
            prompt_tokens=512,
            output_tokens=256,
            lengths=lengths,
        )
        return [t.ttft_s for t in traces if t.ttft_s is not None]

    def p50_p99(values: list[float]) -> tuple[float, float]:
        cuts = statistics.quantiles(values, n=100, method="inclusive")
        return cuts[49], cuts[98]

    same_p50, same_p99 = p50_p99(ttfts())
    assert same_p50 == pytest.approx(same_p99)
    varied_p50, varied_p99 = p50_p99(ttfts(lengths))
    assert varied_p99 > varied_p50 * 1.02


def test_lengths_are_the_load_generators_requests() -> None:
    workload = Workload(input_len=512, output_len=256, range_ratio=0.25, seed=7)
    source = PromptSource(workload)
    drawn = [draw_lengths(workload, n) for n in range(50)]
    assert drawn == [(source.item(n).input_len, source.item(n).output_len) for n in range(50)]
    assert all(384 <= p <= 640 and 192 <= o <= 320 for p, o in drawn)
    assert len(set(drawn)) > 40
    assert drawn == [draw_lengths(workload, n) for n in range(50)]  # seeded: repeatable


def test_too_few_or_empty_lengths_are_refused() -> None:
    profile = load_profile(VLLM)
    with pytest.raises(ValueError, match="2 entries for 3 requests"):
        simulate_closed_loop(
            profile,
            concurrency=1,
            requests=3,
            prompt_tokens=8,
            output_tokens=8,
            lengths=[(8, 8), (8, 8)],
        )
    with pytest.raises(ValueError, match=">= 1"):
        simulate_closed_loop(
            profile, concurrency=1, requests=1, prompt_tokens=8, output_tokens=8, lengths=[(8, 0)]
        )
