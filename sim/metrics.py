"""What the simulated engine has observed, kept dialect-neutral.

The dialect renderers (``sim.dialects``) turn this plus the scheduler's
live gauges into each engine's own metric names.
"""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass, field

from sim.scheduler import Outcome, RequestTrace, Scheduler, StepResult

LATENCY_BUCKETS_S: tuple[float, ...] = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
    640.0,
    2560.0,
)
TOKEN_BUCKETS: tuple[float, ...] = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000)


@dataclass(slots=True)
class Histogram:
    bounds: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    count: int = 0
    total: float = 0.0

    def __post_init__(self) -> None:
        self.counts = [0] * len(self.bounds)

    def observe(self, value: float) -> None:
        self.count += 1
        self.total += value
        for i, bound in enumerate(self.bounds):
            if value <= bound:
                self.counts[i] += 1
                break

    def cumulative(self) -> list[tuple[float, int]]:
        """(upper bound, cumulative count) pairs, +Inf last."""
        out: list[tuple[float, int]] = []
        running = 0
        for bound, n in zip(self.bounds, self.counts, strict=True):
            running += n
            out.append((bound, running))
        out.append((float("inf"), self.count))
        return out


@dataclass(frozen=True, slots=True)
class IterationStat:
    """One engine step, as TensorRT-LLM's JSON /metrics reports iterations."""

    iteration: int
    end_s: float
    latency_s: float
    batch: int
    context_requests: int
    prefill_tokens: int
    queued: int
    kv_used_blocks: int
    kv_free_blocks: int


class SimMetrics:
    def __init__(self) -> None:
        self.ttft = Histogram(LATENCY_BUCKETS_S)
        self.itl = Histogram(LATENCY_BUCKETS_S)
        self.tpot = Histogram(LATENCY_BUCKETS_S)
        self.e2e = Histogram(LATENCY_BUCKETS_S)
        self.queue = Histogram(LATENCY_BUCKETS_S)
        self.prompt_len = Histogram(TOKEN_BUCKETS)
        self.generated_len = Histogram(TOKEN_BUCKETS)
        self.finished_by_reason: Counter[str] = Counter()
        self.requests_received = 0
        # Counters that, as in llama.cpp, move only when a request ends.
        self.ended_prompt_tokens = 0
        self.ended_cached_tokens = 0
        self.ended_prompt_s = 0.0
        self.ended_generated_tokens = 0
        self.ended_generation_s = 0.0
        self.max_sequence_tokens = 0
        self.batch_sum = 0
        self.iterations: deque[IterationStat] = deque(maxlen=1000)

    def observe_step(self, result: StepResult, sched: Scheduler) -> None:
        if result.batch == 0:
            return
        self.batch_sum += result.batch
        self.iterations.append(
            IterationStat(
                sched.counters.steps,
                result.end_s,
                result.end_s - result.start_s,
                result.batch,
                sum(1 for _, i in result.emitted if i == 0),
                result.prefill_tokens,
                sched.num_waiting,
                sched.kv_used_blocks,
                sched.profile.kv_blocks - sched.kv_used_blocks,
            )
        )

    def observe_end(self, trace: RequestTrace, finish_reason: str, prefill_tok_s: float) -> None:
        """Account one request that left the engine (finished, failed or aborted)."""
        if trace.outcome is not Outcome.OK:
            self.finished_by_reason["abort"] += 1
            return
        self.finished_by_reason[finish_reason] += 1
        first, last = trace.token_times_s[0], trace.token_times_s[-1]
        self.ttft.observe(first - trace.arrival_s)
        self.e2e.observe(last - trace.arrival_s)
        if trace.scheduled_s is not None:
            self.queue.observe(trace.scheduled_s - trace.arrival_s)
        for gap in trace.itl_s:
            self.itl.observe(gap)
        if trace.output_tokens > 1:
            self.tpot.observe((last - first) / (trace.output_tokens - 1))
        self.prompt_len.observe(trace.prompt_tokens)
        self.generated_len.observe(trace.output_tokens)
        computed = trace.prompt_tokens - trace.cached_tokens
        self.ended_prompt_tokens += computed
        self.ended_cached_tokens += trace.cached_tokens
        self.ended_prompt_s += computed / prefill_tok_s
        self.ended_generated_tokens += trace.output_tokens
        self.ended_generation_s += last - first
        self.max_sequence_tokens = max(
            self.max_sequence_tokens, trace.prompt_tokens + trace.output_tokens
        )
