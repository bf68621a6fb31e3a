"""One run path (docs/design.md, "The run path"): whoever starts a run, the one
recorder stores it, with what it was, whether it was simulated, and how it ended."""

from __future__ import annotations

import argparse
import os
import subprocess
from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from control import bench as bench_cli
from control.compare_view import comparison_table
from control.loads import profile
from loadgen import ClosedLoop, LoadSpec, Target, Workload, describe_run
from runs.events import (
    LevelFinished,
    RunFailed,
    RunFinished,
    RunInterrupted,
    RunResult,
    RunStarted,
)
from runs.records import LevelSummary
from sim import start_sim
from store import RunRecorder, Store, open_store
from store.errors import StoreError
from store.export import comparison_to_markdown
from store.recorder import judge
from tests.loadgen import conftest as loadgen_conftest
from tests.loadgen.conftest import ROOT, Handler, bench, infer_top_argv
from tests.store.conftest import failed_record, record, summary_from_h200

stand_in_engine = loadgen_conftest.serve  # a stand-in engine (it lists model "m")


def _runs_list(db: Path) -> str:
    done = subprocess.run(
        infer_top_argv("runs", "--db", str(db), "list"),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "250"},
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


async def test_a_run_whose_every_request_failed_is_stored_failed_and_says_why(
    stand_in_engine: Callable[[Handler], Awaitable[str]], tmp_path: Path
) -> None:
    """Every request of the run failed, yet it was stored `completed`: a History of
    green runs that measured nothing."""
    db = tmp_path / "runs.db"

    async def refuse(_: web.Request) -> web.Response:  # it lists the model, then fails
        return web.json_response({"error": {"message": "no"}}, status=500)

    url = await stand_in_engine(refuse)
    code, _out, err = await bench(
        "--url", url, "--model", "m", "--concurrency", "1,2", "--requests", "3",
        "--save", "--db", str(db),
    )  # fmt: skip
    assert code == 1, err
    # the reason ends with the first failure's own words (here the stand-in's HTTP 500)
    said = "all 6 requests failed: http_status 6"
    assert f"(failed: {said}" in err.replace("\n", ""), err
    with open_store(db) as st:
        (run,) = st.list_runs()
    assert run.status == "failed" and (run.status_reason or "").startswith(said + " — "), run
    assert run.request_count == 6  # the failures themselves are kept
    row = next(line for line in _runs_list(db).splitlines() if run.run_id in line)
    assert f"failed: {said}" in row


async def test_a_run_against_the_simulator_is_stored_as_simulated(tmp_path: Path) -> None:
    """`infer-top bench --save` against `infer-top sim` filed simulated figures as
    measurements (simulated: false)."""
    db = tmp_path / "runs.db"
    sim = await start_sim("h100-llama2-7b-vllm", time_scale=0.05)
    try:
        await sim.wait_ready()
        code, _out, err = await bench(
            "--url", sim.url, "--model", sim.profile.model, "--engine", "vllm",
            "--concurrency", "2", "--requests", "4", "--input-len", "16", "--output-len", "8",
            "--save", "--db", str(db),
        )  # fmt: skip
    finally:
        await sim.stop()
    assert code == 0, err
    assert "this engine is infer-top's simulator" in err
    with open_store(db) as st:
        (run,) = st.list_runs()
    assert run.simulated and run.status == "completed" and run.request_count == 4
    row = next(line for line in _runs_list(db).splitlines() if run.run_id in line)
    assert "(simulated)" in row


def test_the_load_screens_profiles_build_what_bench_builds_from_the_same_numbers() -> None:
    """A TUI run and a bench run of the same numbers must be one configuration."""
    parser = argparse.ArgumentParser()
    bench_cli.register(parser.add_subparsers())
    smoke = profile("smoke")
    args = parser.parse_args(
        ["bench", "--url", "http://127.0.0.1:9", "--model", "m", "--concurrency", "1,2",
         "--requests", "4", "--input-len", "32", "--output-len", "16"]
    )  # fmt: skip
    spec, workload, _target = bench_cli.build(args)
    assert smoke.spec() == spec
    # each run draws its own salt (fresh prompts): all else is one configuration
    assert replace(smoke.workload(), salt=workload.salt) == workload


SPEC = LoadSpec((ClosedLoop(1),), requests_per_level=4)
TARGET = Target("http://127.0.0.1:9", "m", "vllm")


def _start(recorder: RunRecorder, run_id: str, **where: Any) -> None:
    setup = describe_run(SPEC, Workload(), TARGET, origin="script", **where)
    recorder.on_event(RunStarted(run_id, 1, (), setup, 1000.0))


def test_the_recorder_writes_the_run_its_requests_levels_and_deployment(mem_store: Store) -> None:
    recorder = RunRecorder(mem_store)
    _start(recorder, "r1", node="h200-1", deployment_id="eng-1", gpu_ids=(3,), simulated=True)
    ok, bad = record("r1", 0, 0), failed_record("r1", 0, 1)
    level = summary_from_h200(0)
    for event in (ok, bad, LevelFinished(level)):
        recorder.on_event(event)
    recorder.on_event(RunFinished(RunResult("r1", 1000.0, 1010.0, (level,), (), 2)))
    recorder.on_event(RunFailed("late"))  # after the end: changes nothing
    mem_store.flush()
    run = mem_store.get_run("r1")
    assert (run.status, run.status_reason, run.finished_at) == ("completed", None, 1010.0)
    assert (run.node, run.deployment_id, run.simulated, run.created_at) == (
        "h200-1", "eng-1", True, 1000.0
    )  # fmt: skip
    assert run.profile == {
        "origin": "script",
        "target": {"model": "m", "url": "http://127.0.0.1:9", "api": "chat"},
        "spec": run.profile["spec"],
        "placement": {"engine_node": "h200-1", "load_node": "control-plane", "path": "direct"},
        "engine": {},  # no agent reported how the engine was started
    }
    assert run.profile["spec"]["requests_per_level"] == 4 and run.workload["input_len"] == 512
    assert list(mem_store.iter_requests("r1")) == [ok, bad]
    assert [lv.summary for lv in mem_store.levels("r1")] == [level]
    title = comparison_to_markdown(mem_store.compare(["r1"])).splitlines()[0]
    assert title.startswith(f"| h200-1, m, {level.concurrency} concurrent |")  # the model
    deployments = mem_store._read(
        lambda c: c.execute(
            "SELECT id, gpus_json, simulated FROM deployments WHERE node = 'h200-1'"
        ).fetchall()
    )
    assert deployments == [("eng-1", "[3]", 1)]


def test_a_run_that_completed_no_request_is_failed_and_says_why() -> None:
    base = summary_from_h200(0)

    def level(completed: int, failed: int, cut: int, **kinds: int) -> LevelSummary:
        return replace(
            base, completed=completed, failed=failed, incomplete=cut, failures_by_kind=kinds
        )

    assert judge([level(5, 1, 0, http_status=1)]) == ("completed", None)
    assert judge([level(0, 3, 0, http_status=2, timeout=1), level(0, 1, 0, http_status=1)]) == (
        "failed",
        "all 4 requests failed: http_status 3, timeout 1",
    )
    assert judge([level(0, 2, 1, connect=2)]) == (
        "failed",
        "no request completed: 2 failed (connect 2), 1 cut",
    )
    said = replace(level(0, 2, 0, connect=1, http_status=1), failure_samples={"http_status": "x"})
    assert judge([said]) == ("failed", "all 2 requests failed: connect 1, http_status 1 — x")
    assert judge([level(0, 0, 3)]) == (
        "failed",
        "no request completed: all 3 were cut at their level's end",
    )


def test_a_run_that_failed_or_was_stopped_is_stored_with_why(mem_store: Store) -> None:
    for run_id, end in (
        ("broke", RunFailed("WorkloadError: bad")),
        ("stopped", RunInterrupted("stopped by SIGTERM")),
    ):
        recorder = RunRecorder(mem_store)
        _start(recorder, run_id)
        recorder.on_event(end)
    mem_store.flush()
    broke, stopped = mem_store.get_run("broke"), mem_store.get_run("stopped")
    assert (broke.status, broke.status_reason) == ("failed", "WorkloadError: bad")
    assert (stopped.status, stopped.status_reason) == ("interrupted", "stopped by SIGTERM")


def test_regressions_ignore_who_started_a_run_and_at_which_url(mem_store: Store) -> None:
    level = summary_from_h200(0)
    for run_id, origin, port in (("a", "tui", 1), ("b", "bench", 2)):
        recorder = RunRecorder(mem_store)
        target = Target(f"http://127.0.0.1:{port}", "m", "vllm")
        setup = describe_run(SPEC, Workload(), target, origin=origin)
        recorder.on_event(RunStarted(run_id, 1, (), setup, 1000.0))
        recorder.on_event(LevelFinished(level))
        recorder.on_event(RunFinished(RunResult(run_id, 1000.0, 1001.0, (level,), (), 0)))
    mem_store.flush()
    assert mem_store.regressions("a", "b") == []


def _options_run(store: Store, run_id: str, prefix_caching: bool, kv_reported: int) -> None:
    recorder = RunRecorder(store)
    engine = {
        "options": {"prefix_caching": prefix_caching, "max_num_seqs": 16},
        "kv_capacity": {"reported_tokens": kv_reported, "estimated_tokens": 600,
                        "difference_tokens": kv_reported - 600, "source": "/metrics",
                        "estimate_basis": "fit estimator"},
    }  # fmt: skip
    _start(recorder, run_id, name=f"vLLM {run_id}", engine=engine)
    level = summary_from_h200(0)
    recorder.on_event(LevelFinished(level))
    recorder.on_event(RunFinished(RunResult(run_id, 1000.0, 1001.0, (level,), (), 0)))


def test_runs_are_stored_with_their_engine_options_and_compare_by_them(mem_store: Store) -> None:
    _options_run(mem_store, "on", True, 640)
    _options_run(mem_store, "off", False, 640)
    _options_run(mem_store, "on-again", True, 672)
    mem_store.flush()
    stored = mem_store.get_run("off")
    assert stored.profile["engine"]["kv_capacity"]["difference_tokens"] == 40
    comparison = mem_store.compare(["on", "off"])
    labels = [cells[0] for _, cells in comparison_table(comparison).rows]
    assert labels == [
        "vLLM on (prefix caching on, max seqs 16)",
        "vLLM off (prefix caching off, max seqs 16)",
    ]
    markdown = comparison_to_markdown(comparison)
    assert "vLLM off (prefix caching off, max seqs 16)" in markdown
    assert "vLLM on (prefix caching on, max seqs 16)" in markdown
    # options are configuration: on vs off is no regression of one configuration; the
    # KV figure of another start of the same configuration is a measurement, not a change
    with pytest.raises(StoreError, match="differ in profile"):
        mem_store.regressions("on", "off")
    assert mem_store.regressions("on", "on-again") == []


@pytest.mark.parametrize(
    "end",
    [
        RunInterrupted("stopped by SIGTERM"),
        # the worker finished its last level before the stop reached it
        RunFinished(RunResult("r", 1000.0, 1010.0, (), (), 1)),
        RunFailed("the load-test worker exited (code -15)"),
    ],
    ids=["interrupted", "finished-meanwhile", "killed"],
)
def test_a_run_the_operator_stopped_is_interrupted_however_the_worker_ends(
    mem_store: Store, end: Any
) -> None:
    """The TUI's cancel reaches the worker a moment after the operator confirmed it: the
    worker could still finish its last level and say RunFinished, and the run was stored
    `completed` while the screen said "saved as interrupted"."""
    recorder = RunRecorder(mem_store)
    _start(recorder, "r")
    level = summary_from_h200(0)
    for event in (record("r", 0, 0), LevelFinished(level)):
        recorder.on_event(event)
    why = "cancelled by the operator in the TUI"
    recorder.stopping(why)
    recorder.on_event(end)
    mem_store.flush()
    run = mem_store.get_run("r")
    assert (run.status, run.status_reason) == ("interrupted", why)
    assert (recorder.status, recorder.reason) == (run.status, run.status_reason)
    assert [lv.summary for lv in mem_store.levels("r")] == [level]  # the finished level kept
