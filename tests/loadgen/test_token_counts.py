"""Token counts: usage when the engine sends it, a re-count always, and their difference."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from loadgen import ClosedLoop, LoadSpec, MemorySink, Target, Workload, run_load

FAST = ("--ttft-ms", "5", "--ttft-spread-ms", "5", "--itl-ms", "2")
SPEC = LoadSpec((ClosedLoop(2),), requests_per_level=6)


async def _run(server: Any, target: Target) -> tuple[MemorySink, Any]:
    sink = MemorySink()
    result = await run_load(SPEC, Workload(input_len=8, output_len=9), target, sink)
    return sink, result.levels[0]


async def test_multi_token_chunks_count_by_usage_and_flag_the_difference(
    sched_server: Callable[..., Any],
) -> None:
    server = sched_server(*FAST, "--tokens-per-chunk", "4")
    sink, level = await _run(server, Target(server.url, "m", "vllm"))
    for r in sink.records:
        assert r.chunk_count == r.counted_output_tokens == 3  # 9 tokens in chunks of 4
        assert r.output_tokens == r.usage_completion_tokens == 9
        assert r.tpot_s is not None and r.e2e_s is not None and r.ttft_s is not None
        assert abs(r.tpot_s - (r.e2e_s - r.ttft_s) / 8) < 1e-12  # per token, not per chunk
        assert len(r.itl_s) == 2  # ITL stays per chunk gap
    assert level.usage_mismatches == 6 and level.total_output_tokens == 54


async def test_without_usage_the_recount_is_used(sched_server: Callable[..., Any]) -> None:
    server = sched_server(*FAST, "--no-usage")
    sink, level = await _run(server, Target(server.url, "m", "vllm"))
    assert all(r.usage_completion_tokens is None and r.prompt_tokens is None for r in sink.records)
    assert all(r.output_tokens == r.counted_output_tokens == 9 for r in sink.records)
    assert level.usage_mismatches == 0 and level.total_output_tokens == 54


async def test_completions_endpoint_streams_text_chunks(sched_server: Callable[..., Any]) -> None:
    server = sched_server(*FAST)
    sink, level = await _run(server, Target(server.url, "m", "vllm", chat=False))
    assert level.completed == 6 and level.failed == 0
    assert all(r.counted_output_tokens == r.usage_completion_tokens == 9 for r in sink.records)
    assert not any(e["chat"] for e in server.truth()["requests"].values())
