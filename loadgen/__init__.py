"""The load generator: profiles, workloads, the runner and its sinks.

Public API (the TUI and the simulator tests use these)::

    spec = LoadSpec(concurrency_sweep([1, 2, 4]), requests_per_level=32)
    result = await run_load(spec, Workload(input_len=512, output_len=128),
                            Target(url, model, engine_kind="vllm"), JsonlSink(path))
    async for event in run_load_in_subprocess(spec, workload, target, record=recorder):
        ...

Every event of a run (``runs.events``, finished requests included) goes to the
caller's callback or ``record`` sink; the load generator never opens the store.
"""

from loadgen.process import run_in_new_loop
from loadgen.profiles import (
    Arrival,
    ClosedLoop,
    Level,
    LoadSpec,
    OpenLoop,
    ProfileError,
    Slo,
    concurrency_sweep,
    parse_slo,
)
from loadgen.runner import Target, run_load
from loadgen.setup import describe_run, plain
from loadgen.sinks import FanoutSink, JsonlSink, MemorySink, RecordSink, read_jsonl
from loadgen.subproc import run_load_in_subprocess
from loadgen.workload import PromptSource, Workload, WorkloadError
from runs.events import (
    LevelFinished,
    LevelProgress,
    LevelStarted,
    ProgressEvent,
    RunFailed,
    RunFinished,
    RunInterrupted,
    RunResult,
    RunStarted,
)
from runs.records import ErrorKind, LevelSummary, Percentiles, RequestRecord

__all__ = [
    "Arrival",
    "ClosedLoop",
    "ErrorKind",
    "FanoutSink",
    "JsonlSink",
    "Level",
    "LevelFinished",
    "LevelProgress",
    "LevelStarted",
    "LevelSummary",
    "LoadSpec",
    "MemorySink",
    "OpenLoop",
    "Percentiles",
    "ProfileError",
    "ProgressEvent",
    "PromptSource",
    "RecordSink",
    "RequestRecord",
    "RunFailed",
    "RunFinished",
    "RunInterrupted",
    "RunResult",
    "RunStarted",
    "Slo",
    "Target",
    "Workload",
    "WorkloadError",
    "concurrency_sweep",
    "describe_run",
    "parse_slo",
    "plain",
    "read_jsonl",
    "run_in_new_loop",
    "run_load",
    "run_load_in_subprocess",
]
