"""The demo's precomputed comparison: the seed's H100 sweep, from simulated engines.

Each engine's simulator profile is run through the simulator's own scheduler in
virtual time (``sim.simulate_closed_loop``: no sockets, milliseconds
per level), the traces become the load generator's ``RequestRecord``s and are
summarised by the load generator's own statistics, then stored as runs marked
simulated by the same recorder every run goes through (``store.recorder``), as
the events a live run would emit.  Nothing here is measured; every row says so.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from loadgen.profiles import ClosedLoop, LoadSpec, concurrency_sweep
from loadgen.stats import summarise_level
from runs.events import LevelFinished, LevelStarted, RunFinished, RunResult, RunStarted
from runs.records import ErrorKind, RequestRecord
from store import Store

if TYPE_CHECKING:  # the simulator itself is imported when a run is simulated
    from sim import RequestTrace
from runs.setup import RunSetup

SEED_PROFILES: tuple[str, ...] = (
    "h100-llama2-7b-trtllm",
    "h100-llama2-7b-lmdeploy",
    "h100-llama2-7b-vllm",
    "h100-llama3.1-8b-ollama",
    "h100-llama2-7b-llamacpp",
)
SEED_CONCURRENCY: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64)


@dataclass(frozen=True, slots=True)
class SweepShape:
    concurrency: tuple[int, ...] = SEED_CONCURRENCY
    prompt_tokens: int = 512
    output_tokens: int = 256
    min_requests: int = 32
    requests_per_client: int = 2
    """Each level sends max(min_requests, requests_per_client × concurrency) requests."""
    range_ratio: float = 0.1
    """Lengths vary in [L(1−r), L(1+r)] like vLLM's random dataset: with identical
    requests every queued one would wait alike and TTFT p99 would equal p50.  At
    0.25 the batching engines' 64-client throughput falls ~6 % below the seed
    table: with two requests per client the longest ones drain the last wave."""
    seed: int = 0
    """The same seed for every engine: all of them see the same requests."""

    def spec(self) -> LoadSpec:
        """The sweep as the load generator's spec, as its runs are stored."""
        return LoadSpec(
            concurrency_sweep(self.concurrency),
            requests_per_level=self.min_requests,
            min_requests_per_client=self.requests_per_client,
            seed=self.seed,
        )


_ERRORS = {
    "rejected": ErrorKind.HTTP_STATUS,
    "timeout": ErrorKind.TIMEOUT,
    "aborted": ErrorKind.BROKEN_STREAM,
}


def trace_to_record(
    trace: RequestTrace, run_id: str, level: int, index: int, epoch: float
) -> RequestRecord:
    times = tuple(epoch + t for t in trace.token_times_s)
    ok = str(trace.outcome) == "ok" and bool(times)
    error = None if ok else _ERRORS.get(str(trace.outcome), ErrorKind.NO_CONTENT)
    sent = epoch + trace.arrival_s
    return RequestRecord(
        run_id=run_id,
        level_index=level,
        request_index=index,
        scheduled_at=sent,
        sent_at=sent,
        first_token_at=times[0] if times else None,
        end_at=times[-1] if times else None,
        prompt_tokens=trace.prompt_tokens,
        output_tokens=len(times),
        usage_completion_tokens=len(times),
        counted_output_tokens=len(times),
        chunk_count=len(times),
        itl_s=tuple(b - a for a, b in itertools.pairwise(times)),
        tokens_per_chunk=(1,) * len(times),
        error_kind=error,
        http_status=503 if error is ErrorKind.HTTP_STATUS else None,
        error_message=None if ok else f"simulated {trace.outcome}: {trace.detail}".strip(),
    )


def simulate_run(
    store: Store,
    profile_name: str,
    *,
    node: str,
    shape: SweepShape,
    start_epoch: float,
    run_id: str | None = None,
) -> str:
    """One simulated sweep of ``profile_name`` saved to ``store``; returns the run id.
    Blocking (CPU and store writes): call it from a thread."""
    from loadgen.process import new_run_id
    from loadgen.setup import plain
    from loadgen.workload import Workload, draw_lengths
    from sim import load_profile, simulate_closed_loop
    from store.recorder import RunRecorder

    profile = load_profile(profile_name)
    kind = str(profile.kind)
    run_id = run_id or new_run_id()
    workload = Workload(
        input_len=shape.prompt_tokens,
        output_len=shape.output_tokens,
        range_ratio=shape.range_ratio,
        seed=shape.seed,
    )
    spec = shape.spec()
    setup = RunSetup(
        origin="demo",
        engine_kind=kind,
        model=profile.model,
        url=None,
        chat=True,
        spec=plain(spec),
        workload=plain(workload),
        name=kind,
        node=node,
        simulated=True,
        software={"engine": f"simulated ({profile_name})", "sim_profile": profile_name},
    )
    recorder = RunRecorder(store)
    recorder.on_event(RunStarted(run_id, len(spec.levels), (), setup, start_epoch))
    epoch = start_epoch
    first_number = 0  # numbered across the run, as the load generator numbers its requests
    summaries = []
    for level, concurrency in enumerate(shape.concurrency):
        closed = ClosedLoop(concurrency)
        requests = spec.requests_for(closed) or 0  # the sweep stops by count: never None
        recorder.on_event(LevelStarted(level, concurrency, None, requests, None))
        lengths = [draw_lengths(workload, first_number + n) for n in range(requests)]
        first_number += requests
        traces = simulate_closed_loop(
            profile,
            concurrency=concurrency,
            requests=requests,
            prompt_tokens=shape.prompt_tokens,
            output_tokens=shape.output_tokens,
            lengths=lengths,
        )
        records = [trace_to_record(t, run_id, level, i, epoch) for i, t in enumerate(traces)]
        for record in records:
            recorder.on_event(record)
        summary = summarise_level(level, closed, records, None)
        recorder.on_event(LevelFinished(summary))
        summaries.append(summary)
        epoch = max(summary.ended_at, epoch) + 1.0
    result = RunResult(run_id, start_epoch, epoch, tuple(summaries), (), first_number)
    recorder.on_event(RunFinished(result))
    return run_id


def simulate_seed_table(
    store: Store,
    *,
    node: str,
    start_epoch: float,
    profiles: Sequence[str] = SEED_PROFILES,
    shape: SweepShape | None = None,
    progress: Callable[[str, float], None] | None = None,
    id_prefix: str | None = None,
) -> list[str]:
    """The seed's comparison (five engines on an H100, concurrency 1-64), simulated;
    ``id_prefix`` gives the runs fixed ids (tests), else they are random."""
    ids = []
    for i, name in enumerate(profiles):
        if progress:
            progress(f"simulating {name} ({i + 1}/{len(profiles)})", i / len(profiles))
        ids.append(
            simulate_run(
                store,
                name,
                node=node,
                shape=shape or SweepShape(),
                start_epoch=start_epoch + i * 3600,
                run_id=f"{id_prefix}{i:02d}-{name}" if id_prefix else None,
            )
        )
    store.flush()
    if progress:
        progress(f"{len(ids)} simulated runs ready: press 5 to compare", 1.0)
    return ids
