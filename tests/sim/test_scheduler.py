"""The pure scheduler model, in virtual time: exact schedules, no sockets."""

from __future__ import annotations

import pytest

from sim import Arrival, Outcome, SimProfile, simulate
from sim.scheduler import Scheduler


def tiny(**changes: object) -> SimProfile:
    base = SimProfile(
        name="tiny",
        kind="vllm",
        model="m",
        hardware="test",
        max_num_seqs=4,
        kv_block_size_tokens=4,
        kv_blocks=64,
        max_model_len=256,
        prefill_tok_s=1000.0,
        step_base_s=0.010,
        step_per_seq_s=0.002,
        step_per_kv_token_s=0.0001,
    )
    return base.with_overrides(**changes)


def test_single_request_follows_the_step_law_exactly() -> None:
    p = tiny()
    [trace] = simulate(p, [Arrival("a", 1.0, prompt_tokens=10, output_tokens=4)])
    # Step 1 prefills 10 tokens and yields token 0; then one decode step per token.
    t = 1.0 + p.step_base_s + p.step_per_seq_s + p.step_per_kv_token_s * 10 + 10 / 1000.0
    expected = [t]
    for k in range(1, 4):
        t += p.step_base_s + p.step_per_seq_s + p.step_per_kv_token_s * (10 + k)
        expected.append(t)
    assert trace.outcome is Outcome.OK
    assert trace.token_times_s == pytest.approx(expected, abs=1e-12)
    assert trace.scheduled_s == 1.0
    assert trace.ttft_s == pytest.approx(expected[0] - 1.0)


def test_step_time_grows_with_batch() -> None:
    p = tiny()
    alone = simulate(p, [Arrival("a", 0.0, 8, 6)])[0]
    crowd = simulate(p, [Arrival(f"r{i}", 0.0, 8, 6) for i in range(4)])[0]
    assert min(crowd.itl_s) > max(alone.itl_s)
    gap = crowd.itl_s[0] - alone.itl_s[0]
    # 3 more sequences: 3·b plus their KV tokens' share.
    assert gap == pytest.approx(3 * p.step_per_seq_s + 3 * 9 * p.step_per_kv_token_s)


def test_requests_queue_when_sequences_run_out() -> None:
    p = tiny(max_num_seqs=2)
    traces = simulate(p, [Arrival(f"r{i}", 0.0, 8, 5) for i in range(3)])
    first, second, third = traces
    assert first.queue_s == 0 and second.queue_s == 0
    # The third waits until a slot frees: admitted in the step after the first two end.
    assert third.scheduled_s == pytest.approx(first.finished_s)
    assert third.ttft_s is not None and third.ttft_s > first.finished_s - 0.0


def test_full_kv_pool_preempts_and_recomputes() -> None:
    p = tiny(kv_blocks=12, max_num_seqs=8)
    traces = simulate(p, [Arrival(f"r{i}", 0.0, 8, 12) for i in range(3)])
    assert all(t.outcome is Outcome.OK and t.output_tokens == 12 for t in traces)
    preempted = [t for t in traces if t.preemptions]
    assert preempted, "a 12-block pool cannot hold three 20-token sequences"
    victim = preempted[0]
    # A preempted request stalls: its largest gap exceeds any single decode step.
    assert max(victim.itl_s) > 2 * p.step_time_s(3, 60)


def test_queued_requests_wait_for_kv_blocks() -> None:
    p = tiny(kv_blocks=6, max_num_seqs=8)
    a, b = simulate(p, [Arrival("a", 0.0, 16, 4), Arrival("b", 0.0, 16, 4)])
    assert a.queue_s == 0
    assert b.scheduled_s == pytest.approx(a.finished_s)


def test_prefix_cache_hit_saves_prefill() -> None:
    p = tiny()
    shared = (11, 22, 33)  # three full blocks = 12 tokens
    cold, warm = simulate(p, [Arrival("a", 0.0, 14, 2, shared), Arrival("b", 5.0, 14, 2, shared)])
    assert cold.cached_tokens == 0
    assert warm.cached_tokens == 12
    assert warm.ttft_s == pytest.approx(cold.ttft_s - 12 / p.prefill_tok_s)
    off = simulate(
        tiny(prefix_caching=False),
        [Arrival("a", 0.0, 14, 2, shared), Arrival("b", 5.0, 14, 2, shared)],
    )
    assert off[1].cached_tokens == 0


def test_queue_timeout_and_full_queue_fail_requests() -> None:
    p = tiny(max_num_seqs=1, queue_timeout_s=0.5, max_waiting=3)
    arrivals = [Arrival(f"r{i}", 0.0, 8, 50) for i in range(4)]
    traces = simulate(p, arrivals)
    outcomes = [t.outcome for t in traces]
    assert outcomes[0] is Outcome.OK
    assert outcomes[1:3] == [Outcome.TIMEOUT, Outcome.TIMEOUT]
    assert outcomes[3] is Outcome.REJECTED and "queue is full" in traces[3].detail


def test_oversized_request_is_rejected_with_a_reason() -> None:
    [trace] = simulate(tiny(), [Arrival("big", 0.0, 250, 10)])
    assert trace.outcome is Outcome.REJECTED
    assert "context length" in trace.detail


def test_same_arrivals_give_the_same_schedule() -> None:
    p = tiny(kv_blocks=20)
    arrivals = [Arrival(f"r{i}", i * 0.013, 6 + i % 5, 7 + i % 3) for i in range(20)]
    assert simulate(p, arrivals) == simulate(p, arrivals)


def test_abort_frees_the_slot() -> None:
    s = Scheduler(tiny(max_num_seqs=1))
    s.add(Arrival("a", 0.0, 8, 100))
    s.add(Arrival("b", 0.0, 8, 2))
    s.step()
    trace = s.abort("a", s.clock)
    assert trace is not None and trace.outcome is Outcome.ABORTED and trace.output_tokens == 1
    while s.has_work():
        s.step()
    assert s.kv_used_blocks == 0 and s.num_running == 0
