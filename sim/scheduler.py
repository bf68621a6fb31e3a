"""The pure scheduler model: a discrete-event simulation in virtual time.

No sockets, no clocks.  ``Scheduler.step()`` runs one engine iteration the way
a continuous-batching engine does (vLLM-like):

1. requests queued longer than ``queue_timeout_s`` fail;
2. every running sequence reserves KV for the token it is about to produce —
   when the pool is full the most recently admitted sequence is preempted
   (its blocks are freed; it is recomputed when readmitted);
3. queued requests are admitted FIFO while a sequence slot and KV blocks are
   free (a prefix-cache hit saves prefill work and blocks);
4. the step lasts ``a + b × batch + c × kv_tokens + prefill_tokens / prefill_tok_s``
   and every sequence in the batch produces one token at its end.

The same class drives the real-time server, so what the server streams is
exactly what this model computes; ``simulate`` and ``simulate_closed_loop``
run it alone, which is how the calibration against the seed table is tested.
"""

from __future__ import annotations

import itertools
import math
from collections import OrderedDict, deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum

from sim.profile import SimProfile


class Outcome(StrEnum):
    OK = "ok"
    REJECTED = "rejected"  # refused on arrival: too long, or the queue was full
    TIMEOUT = "timeout"  # queued longer than the profile's queue timeout
    ABORTED = "aborted"  # the client went away or a fault cut it


@dataclass(frozen=True, slots=True)
class Arrival:
    request_id: str
    at_s: float
    prompt_tokens: int
    output_tokens: int
    """Tokens this request will produce (already decided from max_tokens / EOS rules)."""
    block_hashes: tuple[int, ...] = ()
    """Chained hashes of the prompt's full KV blocks, for prefix-cache hits."""


@dataclass(frozen=True, slots=True)
class RequestTrace:
    """The true schedule of one request (virtual seconds)."""

    request_id: str
    arrival_s: float
    prompt_tokens: int
    target_tokens: int
    outcome: Outcome
    scheduled_s: float | None = None
    """Start of the step that first admitted it (end of queueing)."""
    token_times_s: tuple[float, ...] = ()
    finished_s: float | None = None
    cached_tokens: int = 0
    preemptions: int = 0
    detail: str = ""

    @property
    def output_tokens(self) -> int:
        return len(self.token_times_s)

    @property
    def first_token_s(self) -> float | None:
        return self.token_times_s[0] if self.token_times_s else None

    @property
    def ttft_s(self) -> float | None:
        first = self.first_token_s
        return None if first is None else first - self.arrival_s

    @property
    def queue_s(self) -> float | None:
        return None if self.scheduled_s is None else self.scheduled_s - self.arrival_s

    @property
    def itl_s(self) -> tuple[float, ...]:
        t = self.token_times_s
        return tuple(b - a for a, b in itertools.pairwise(t))


@dataclass(slots=True)
class _Seq:
    arrival: Arrival
    slot: int = -1
    generated: int = 0
    blocks: int = 0
    shared_blocks: int = 0
    cached_tokens: int = 0
    scheduled_s: float | None = None
    preemptions: int = 0
    prefill_pending: bool = True
    token_times: list[float] = field(default_factory=list)

    @property
    def context(self) -> int:
        return self.arrival.prompt_tokens + self.generated


@dataclass(frozen=True, slots=True)
class SeqView:
    """A running sequence as an engine's introspection endpoint shows it."""

    request_id: str
    slot: int
    prompt_tokens: int
    cached_tokens: int
    generated: int
    target_tokens: int


@dataclass(frozen=True, slots=True)
class StepResult:
    start_s: float
    end_s: float
    batch: int
    prefill_tokens: int
    emitted: tuple[tuple[str, int], ...]
    """(request id, token index) pairs produced at ``end_s``."""
    finished: tuple[RequestTrace, ...]
    failed: tuple[RequestTrace, ...]
    """Requests that timed out in the queue at ``start_s``."""
    preempted: tuple[str, ...]


@dataclass(slots=True)
class SchedulerCounters:
    prompt_tokens: int = 0
    """Prompt tokens computed (cache hits excluded; recomputation included)."""
    prefix_queries_tokens: int = 0
    prefix_hit_tokens: int = 0
    generation_tokens: int = 0
    preemptions: int = 0
    steps: int = 0
    prefill_steps: int = 0
    busy_s: float = 0.0


class Scheduler:
    def __init__(self, profile: SimProfile) -> None:
        self.profile = profile
        self.clock = 0.0
        self.counters = SchedulerCounters()
        self._waiting: deque[_Seq] = deque()
        self._running: list[_Seq] = []
        self._live: dict[str, _Seq] = {}
        self._free_blocks = profile.kv_blocks
        self._free_slots = list(range(profile.max_num_seqs))
        self._cache: OrderedDict[int, None] = OrderedDict()

    # ---- queries -------------------------------------------------------
    def has_work(self) -> bool:
        return bool(self._running or self._waiting)

    def next_start(self) -> float:
        """When the next step begins: back to back while busy, else at the next arrival."""
        if self._running:
            return self.clock
        if self._waiting:
            return max(self.clock, min(s.arrival.at_s for s in self._waiting))
        return math.inf

    @property
    def num_running(self) -> int:
        return len(self._running)

    @property
    def num_waiting(self) -> int:
        return len(self._waiting)

    @property
    def kv_used_blocks(self) -> int:
        return self.profile.kv_blocks - self._free_blocks

    @property
    def kv_usage(self) -> float:
        return self.kv_used_blocks / self.profile.kv_blocks

    @property
    def kv_tokens(self) -> int:
        return sum(s.context for s in self._running)

    def running_view(self) -> tuple[SeqView, ...]:
        return tuple(
            SeqView(
                s.arrival.request_id,
                s.slot,
                s.arrival.prompt_tokens,
                s.cached_tokens,
                s.generated,
                s.arrival.output_tokens,
            )
            for s in self._running
        )

    # ---- inputs --------------------------------------------------------
    def add(self, arrival: Arrival) -> RequestTrace | None:
        """Queue a request; returns its trace when it is refused on arrival."""
        p = self.profile
        reason = ""
        if arrival.request_id in self._live:
            raise ValueError(f"duplicate request id {arrival.request_id!r}")
        if arrival.prompt_tokens < 1 or arrival.output_tokens < 1:
            reason = "a request needs at least one prompt and one output token"
        elif arrival.prompt_tokens + arrival.output_tokens > p.max_model_len:
            reason = (
                f"prompt ({arrival.prompt_tokens}) + output ({arrival.output_tokens}) tokens "
                f"exceed the model's context length {p.max_model_len}"
            )
        elif self._blocks_for(arrival.prompt_tokens + arrival.output_tokens) > p.kv_blocks:
            reason = "request does not fit in the KV cache"
        elif p.max_waiting is not None and len(self._waiting) >= p.max_waiting:
            reason = "server busy: the request queue is full"
        if reason:
            return RequestTrace(
                arrival.request_id,
                arrival.at_s,
                arrival.prompt_tokens,
                arrival.output_tokens,
                Outcome.REJECTED,
                finished_s=arrival.at_s,
                detail=reason,
            )
        seq = _Seq(arrival)
        self._live[arrival.request_id] = seq
        self._waiting.append(seq)
        return None

    def abort(self, request_id: str, at_s: float, detail: str = "aborted") -> RequestTrace | None:
        """Drop a request (client gone, fault); None when it already ended."""
        seq = self._live.pop(request_id, None)
        if seq is None:
            return None
        if seq in self._running:
            self._running.remove(seq)
            self._release(seq)
        else:
            self._waiting.remove(seq)
        return self._trace(seq, Outcome.ABORTED, max(at_s, self.clock), detail)

    # ---- the engine iteration ------------------------------------------
    def step(self) -> StepResult | None:
        start = self.next_start()
        if start == math.inf:
            return None
        p = self.profile
        failed = self._expire(start)
        preempted = self._reserve_decode_blocks()
        prefill_tokens = self._admit(start)
        batch = len(self._running)
        if batch == 0:
            self.clock = start
            return StepResult(start, start, 0, 0, (), (), tuple(failed), tuple(preempted))
        kv_tokens = sum(s.context for s in self._running)
        end = start + p.step_time_s(batch, kv_tokens, prefill_tokens)
        emitted: list[tuple[str, int]] = []
        finished: list[RequestTrace] = []
        for seq in list(self._running):
            if seq.prefill_pending:
                seq.prefill_pending = False
                self._remember_prefix(seq.arrival.block_hashes)
            seq.token_times.append(end)
            emitted.append((seq.arrival.request_id, seq.generated))
            seq.generated += 1
            if seq.generated >= seq.arrival.output_tokens:
                self._running.remove(seq)
                self._release(seq)
                del self._live[seq.arrival.request_id]
                finished.append(self._trace(seq, Outcome.OK, end))
        c = self.counters
        c.generation_tokens += len(emitted)
        c.steps += 1
        c.prefill_steps += 1 if prefill_tokens else 0
        c.busy_s += end - start
        self.clock = end
        return StepResult(
            start,
            end,
            batch,
            prefill_tokens,
            tuple(emitted),
            tuple(finished),
            tuple(failed),
            tuple(preempted),
        )

    # ---- internals -----------------------------------------------------
    def _blocks_for(self, tokens: int) -> int:
        return -(-tokens // self.profile.kv_block_size_tokens)

    def _expire(self, start: float) -> list[RequestTrace]:
        timeout = self.profile.queue_timeout_s
        if timeout is None:
            return []
        failed = []
        for seq in list(self._waiting):
            if seq.scheduled_s is None and start - seq.arrival.at_s > timeout:
                self._waiting.remove(seq)
                del self._live[seq.arrival.request_id]
                failed.append(self._trace(seq, Outcome.TIMEOUT, start, "queue timeout"))
        return failed

    def _reserve_decode_blocks(self) -> list[str]:
        preempted: list[str] = []
        i = 0
        while i < len(self._running):
            seq = self._running[i]
            need = self._blocks_for(seq.context + 1) - seq.shared_blocks - seq.blocks
            while need > self._free_blocks:
                victim = self._running.pop()
                self._preempt(victim)
                preempted.append(victim.arrival.request_id)
                if victim is seq:
                    break
            else:
                self._free_blocks -= need
                seq.blocks += need
                i += 1
        return preempted

    def _preempt(self, seq: _Seq) -> None:
        self._release(seq)
        seq.preemptions += 1
        seq.prefill_pending = True
        self.counters.preemptions += 1
        self._waiting.appendleft(seq)

    def _release(self, seq: _Seq) -> None:
        self._free_blocks += seq.blocks
        seq.blocks = 0
        seq.shared_blocks = 0
        if seq.slot >= 0:
            self._free_slots.append(seq.slot)
            self._free_slots.sort()
            seq.slot = -1

    def _admit(self, start: float) -> int:
        p = self.profile
        prefill_tokens = 0
        while self._waiting and len(self._running) < p.max_num_seqs:
            seq = self._waiting[0]
            if seq.arrival.at_s > start:
                break
            first_time = seq.scheduled_s is None
            hit_blocks = self._prefix_hits(seq.arrival) if first_time else 0
            need = self._blocks_for(seq.context + 1) - hit_blocks
            if need > self._free_blocks:
                break
            self._waiting.popleft()
            cached = min(hit_blocks * p.kv_block_size_tokens, seq.arrival.prompt_tokens - 1)
            if first_time:
                seq.scheduled_s = start
                seq.cached_tokens = cached
                self.counters.prefix_queries_tokens += seq.arrival.prompt_tokens
                self.counters.prefix_hit_tokens += cached
            computed = seq.context - cached
            self.counters.prompt_tokens += computed
            prefill_tokens += computed
            self._free_blocks -= need
            seq.blocks, seq.shared_blocks = need, hit_blocks
            seq.prefill_pending = True
            seq.slot = self._free_slots.pop(0)
            self._running.append(seq)
        return prefill_tokens

    def _prefix_hits(self, arrival: Arrival) -> int:
        if not self.profile.prefix_caching:
            return 0
        hits = 0
        for h in arrival.block_hashes:
            if h not in self._cache:
                break
            self._cache.move_to_end(h)
            hits += 1
        return hits

    def _remember_prefix(self, hashes: Iterable[int]) -> None:
        if not self.profile.prefix_caching:
            return
        for h in hashes:
            self._cache[h] = None
            self._cache.move_to_end(h)
        while len(self._cache) > self.profile.kv_blocks:
            self._cache.popitem(last=False)

    def _trace(self, seq: _Seq, outcome: Outcome, at_s: float, detail: str = "") -> RequestTrace:
        a = seq.arrival
        return RequestTrace(
            a.request_id,
            a.at_s,
            a.prompt_tokens,
            a.output_tokens,
            outcome,
            scheduled_s=seq.scheduled_s,
            token_times_s=tuple(seq.token_times),
            finished_s=at_s,
            cached_tokens=seq.cached_tokens,
            preemptions=seq.preemptions,
            detail=detail,
        )
