"""The load generator: profiles, workloads, the runner and its sinks.

Public API (the TUI and the simulator tests use these)::

    spec = LoadSpec(concurrency_sweep([1, 2, 4]), requests_per_level=32)
    result = await run_load(spec, Workload(input_len=512, output_len=128),
                            Target(url, model, engine_kind="vllm"), JsonlSink(path))
    async for event in run_load_in_subprocess(spec, workload, target, SinkSpec(jsonl_path=...)):
        ...
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
from loadgen.sinks import FanoutSink, JsonlSink, MemorySink, RecordSink, read_jsonl
from loadgen.subproc import SinkSpec, run_load_in_subprocess
from loadgen.workload import PromptSource, Workload, WorkloadError
from runs.events import (
    LevelFinished,
    LevelProgress,
    LevelStarted,
    ProgressEvent,
    RunFailed,
    RunFinished,
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
    "RunResult",
    "RunStarted",
    "SinkSpec",
    "Slo",
    "Target",
    "Workload",
    "WorkloadError",
    "concurrency_sweep",
    "parse_slo",
    "read_jsonl",
    "run_in_new_loop",
    "run_load",
    "run_load_in_subprocess",
]
