"""Running the scheduler model alone, in virtual time (no sockets, no clocks).

``simulate`` replays given arrivals (open loop); ``simulate_closed_loop`` keeps
N clients busy, each sending its next request the moment its last one ends —
the workload of the calibration against the seed table.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from sim.profile import SimProfile
from sim.scheduler import Arrival, RequestTrace, Scheduler


def simulate(profile: SimProfile, arrivals: Sequence[Arrival]) -> list[RequestTrace]:
    """Open-loop simulation: every request's true schedule, in arrival order."""
    sched = Scheduler(profile)
    pending = sorted(arrivals, key=lambda a: a.at_s)
    traces: dict[str, RequestTrace] = {}
    i = 0
    while i < len(pending) or sched.has_work():
        start = sched.next_start()
        if start == math.inf:
            start = pending[i].at_s
        while i < len(pending) and pending[i].at_s <= start:
            refused = sched.add(pending[i])
            if refused is not None:
                traces[refused.request_id] = refused
            i += 1
        result = sched.step()
        if result is not None:
            for trace in (*result.finished, *result.failed):
                traces[trace.request_id] = trace
    return [traces[a.request_id] for a in arrivals]


def simulate_closed_loop(
    profile: SimProfile,
    *,
    concurrency: int,
    requests: int,
    prompt_tokens: int,
    output_tokens: int,
    lengths: Sequence[tuple[int, int]] | None = None,
) -> list[RequestTrace]:
    """``concurrency`` clients, each sending its next request the moment the last ends.

    Request i asks for ``lengths[i]`` (prompt, output) tokens when given, else every
    request asks for ``prompt_tokens`` / ``output_tokens``.  Identical requests all
    wait alike; varied lengths, as real benchmarks send, spread the queue waits.
    """
    if lengths is not None:
        if len(lengths) < requests:
            raise ValueError(f"lengths has {len(lengths)} entries for {requests} requests")
        bad = [pair for pair in lengths[:requests] if min(pair) < 1]
        if bad:
            raise ValueError(f"every prompt and output length must be >= 1, got {bad[0]}")
    sched = Scheduler(profile)
    traces: list[RequestTrace] = []
    sent = 0

    def send(at_s: float) -> None:
        nonlocal sent
        n_in, n_out = lengths[sent] if lengths is not None else (prompt_tokens, output_tokens)
        refused = sched.add(Arrival(f"r{sent}", at_s, n_in, n_out))
        sent += 1
        if refused is not None:
            traces.append(refused)

    for _ in range(min(concurrency, requests)):
        send(0.0)
    while sched.has_work():
        result = sched.step()
        if result is None:
            break
        for trace in (*result.finished, *result.failed):
            traces.append(trace)
            if sent < requests:
                send(trace.finished_s or result.end_s)
    return traces
