"""``infer-top bench --workers N``: one run spread over N load-generator processes on
this machine (docs/design.md, "The run path").

One event loop holds many streams, but its Python work per token takes one core: past
that the client, not the engine, sets the figures.  Each worker process
(``loadgen.subproc``) sends a share of the run (``control.distributed.split_spec``:
concurrency, rate and request counts divided; ``split_workload``: its own prompts),
all starting at one instant; their events are merged into one run by
``control.merge.Merger`` as a distributed run's are: every record reaches the one
recorder, and each level's summary is computed from all workers' records (exact
percentiles, never an average of per-worker ones).  The workers share this machine's
clock, so no offset is applied and the records name no load node.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncGenerator, Callable

from control.distributed import follow_shares, split_spec, split_workload
from control.merge import Merger, ShareSink
from control.noderuns import EmitSink, run_result
from loadgen.process import new_run_id
from loadgen.profiles import LoadSpec
from loadgen.runner import Target
from loadgen.sizing import sized_prompts
from loadgen.subproc import run_load_in_subprocess
from loadgen.workload import Workload
from runs.events import ProgressEvent, RunEvent, RunEventSink, RunResult, RunStarted
from runs.setup import RunSetup

START_LEAD_S = 3.0
"""How far ahead the workers' common start is set: time to spawn each process and
import the load generator (about a second each on a busy 2-core machine)."""


async def run_workers(
    spec: LoadSpec,
    workload: Workload,
    target: Target,
    workers: int,
    record: RunEventSink,
    *,
    setup: RunSetup,
    start_lead_s: float = START_LEAD_S,
) -> AsyncGenerator[ProgressEvent, None]:
    """The merged run's progress events, the last its end; ``record`` gets the merged
    run's every event. Closing it early stops every worker (their cut requests are
    recorded). ProfileError when a level is too small to give each worker some."""
    shares, workloads = split_spec(spec, workers), split_workload(workload, workers)
    # The prompts are sized here once for the stored setup (each worker sizes its own).
    sized = await sized_prompts(workload, target)
    names = [str(i + 1) for i in range(workers)]
    run_id = new_run_id()
    merger = Merger(
        run_id, spec, shares, names, dict.fromkeys(names, 0.0), record,
        kind="worker", tag_records=False,
    )  # fmt: skip
    start_at = time.time() + start_lead_s
    warnings = (sized.warning,) if sized.warning else ()
    yield merger.start(
        RunStarted(run_id, len(spec.levels), warnings, sized.describe(setup), start_at)
    )
    runs = [
        run_load_in_subprocess(
            shares[i],
            workloads[i],
            target,
            record=ShareSink(merger, i),
            run_id=f"{run_id}-{name}",
            start_at=start_at,
        )
        for i, name in enumerate(names)
    ]
    events = follow_shares(merger, runs)
    async with contextlib.aclosing(events):
        async for event in events:
            yield event


async def bench_workers(
    spec: LoadSpec,
    workload: Workload,
    target: Target,
    workers: int,
    emit: Callable[[RunEvent], None],
    *,
    setup: RunSetup,
) -> RunResult:
    """The run over ``workers`` processes, every event of the merged run to ``emit``;
    its result, or NodeRunEnded when it had none."""
    events = run_workers(spec, workload, target, workers, EmitSink(emit), setup=setup)
    return await run_result(events, f"over {workers} worker processes")
