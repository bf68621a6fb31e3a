"""The shipped profiles against the seed table (arXiv 2505.01658, H100 and Orin).

Closed loop in virtual time: N clients, 512 prompt / 256 output tokens each,
six requests per client; throughput = output tokens / makespan.  Virtual time has
no clocks and no randomness, so the figures are exact and the tolerance is what
the docs claim (2 %), not a margin for noise.
"""

from __future__ import annotations

import statistics
from functools import cache

import pytest

from sim import Outcome, RequestTrace, list_profiles, load_profile, simulate_closed_loop

SEED_TABLE_TOK_S = {
    "h100-llama2-7b-trtllm": 7535.0,
    "h100-llama2-7b-lmdeploy": 4246.0,
    "h100-llama2-7b-vllm": 4107.0,
    "h100-llama3.1-8b-ollama": 588.0,
    "h100-llama2-7b-llamacpp": 431.0,
}


@cache
def run(name: str, concurrency: int) -> tuple[RequestTrace, ...]:
    return tuple(
        simulate_closed_loop(
            load_profile(name),
            concurrency=concurrency,
            requests=concurrency * 6,
            prompt_tokens=512,
            output_tokens=256,
        )
    )


def tok_s(name: str, concurrency: int) -> float:
    traces = run(name, concurrency)
    tokens = sum(t.output_tokens for t in traces if t.outcome is Outcome.OK)
    end = max(t.finished_s or 0.0 for t in traces)
    return tokens / (end - min(t.arrival_s for t in traces))


def test_every_shipped_profile_loads_and_is_marked_simulated() -> None:
    names = list_profiles()
    assert set(SEED_TABLE_TOK_S) <= set(names)
    for name in names:
        p = load_profile(name)
        assert p.simulated and "simulated" in p.hardware
        assert p.name == name


def test_virtual_time_calibration_is_deterministic() -> None:
    name = "h100-llama2-7b-vllm"
    assert run.__wrapped__(name, 64) == run.__wrapped__(name, 64)


@pytest.mark.parametrize("name", sorted(SEED_TABLE_TOK_S))
def test_64_concurrent_throughput_within_2_percent(name: str) -> None:
    assert tok_s(name, 64) == pytest.approx(SEED_TABLE_TOK_S[name], rel=0.02)


def test_seed_table_ordering_and_ratios() -> None:
    got = {name: tok_s(name, 64) for name in SEED_TABLE_TOK_S}
    assert sorted(got, key=got.__getitem__, reverse=True) == list(SEED_TABLE_TOK_S)
    vllm, trt = got["h100-llama2-7b-vllm"], got["h100-llama2-7b-trtllm"]
    ollama = got["h100-llama3.1-8b-ollama"]
    assert vllm / trt == pytest.approx(4107 / 7535, rel=0.02)  # ≈ 0.55
    assert ollama / vllm == pytest.approx(588 / 4107, rel=0.02)  # ≈ 0.14


def test_trtllm_has_the_lowest_ttft_at_64() -> None:
    p50 = {n: statistics.median(t.ttft_s or 0.0 for t in run(n, 64)) for n in SEED_TABLE_TOK_S}
    assert min(p50, key=p50.__getitem__) == "h100-llama2-7b-trtllm"


def test_llamacpp_queues_beyond_8_and_fails_at_64() -> None:
    name = "h100-llama2-7b-llamacpp"
    at8, at16, at64 = run(name, 8), run(name, 16), run(name, 64)
    assert max(t.queue_s or 0.0 for t in at8) == 0.0
    assert sum(1 for t in at16 if (t.queue_s or 0.0) > 1.0) >= 16
    assert all(t.outcome is Outcome.OK for t in at8 + at16)
    failed = [t for t in at64 if t.outcome is Outcome.TIMEOUT]
    assert failed, "requests deferred past the 30 s timeout must fail at 64 concurrent"
    # vLLM at 64 neither queues nor fails.
    assert all(t.outcome is Outcome.OK and t.queue_s == 0 for t in run("h100-llama2-7b-vllm", 64))


def test_orin_8b_ttft_is_30_to_40_s_and_3b_is_practical() -> None:
    big = statistics.mean(t.ttft_s or 0.0 for t in run("orin-llama3.1-8b-llamacpp", 4))
    assert 30.0 <= big <= 40.0
    for concurrency in (1, 2):
        small = run("orin-llama3.2-3b-llamacpp", concurrency)
        assert max(t.ttft_s or 0.0 for t in small) < 2.0
