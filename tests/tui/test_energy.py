"""GPU energy recorded while a load test runs becomes tok/J in the comparison.

No GPU here: the frames are the real H200 recording (``tests/tui/replay_frames.py``) presented
as measured — the stand-in for absent hardware, at the frame boundary."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from control.loads import profile
from loadgen import Target, describe_run
from runs.events import LevelFinished, RunFinished, RunResult, RunStarted
from store import RunRecorder, open_store
from tests.tui.conftest import EPOCH, SIZE, fleet_frames, frozen_app, frozen_services


def recorded_run(store: Any, app: Any, node: str, seed_level: Any, *, simulated_gpus: bool) -> str:
    smoke = profile("smoke")
    setup = describe_run(
        smoke.spec(),
        smoke.workload(),
        Target("http://127.0.0.1:9", "m", "vllm"),
        origin="tui",
        node=node,
        deployment_id=f"eng-{node}",
        gpu_ids=(1,),
    )
    level = replace(seed_level, started_at=EPOCH + 10, ended_at=EPOCH + 40, energy_j=None)
    recorder = RunRecorder(store)
    recorder.on_event(RunStarted(f"run-{node}", 1, (), setup, EPOCH))
    app.record_telemetry(node, True)
    for frame in fleet_frames(node, 2, range(60)):
        app.ingest(
            node, frame if simulated_gpus else replace(frame, simulated=False, platform="nvidia")
        )
    app.record_telemetry(node, False)
    recorder.on_event(LevelFinished(level))
    recorder.on_event(
        RunFinished(RunResult(f"run-{node}", level.started_at, level.ended_at, (level,), (), 0))
    )
    return f"run-{node}"


async def test_tok_per_joule_from_measured_gpus_only(tmp_path: Path, seed_store: Any) -> None:
    seed_level = seed_store.levels("seed02-h100-llama2-7b-vllm")[-1].summary
    store = open_store(tmp_path / "runs.db")
    try:
        app = frozen_app(frozen_services(store=store))
        async with app.run_test(size=SIZE):
            measured = recorded_run(store, app, "gpu-node", seed_level, simulated_gpus=False)
            replayed = recorded_run(store, app, "replay-node", seed_level, simulated_gpus=True)
            for frame in fleet_frames("idle-node", 2, range(60)):  # no run: not recorded
                app.ingest("idle-node", replace(frame, simulated=False))
        store.flush()
        rows = {r.run_id: r for r in store.compare([measured, replayed]).rows}
        good = rows[measured]
        assert good.energy_source == "telemetry"
        assert good.energy_j is not None and good.energy_j > 0
        # only GPU 1 (the engine's) over the 30 s window: at most 700 W x 30 s
        assert good.energy_j < 700 * 30
        assert good.tok_per_j is not None and good.tok_per_j > 0
        assert rows[replayed].energy_j is None and rows[replayed].tok_per_j is None
        stored = dict(
            store._read(
                lambda c: c.execute(
                    "SELECT node, count(*) FROM gpu_samples WHERE gpu_index = 1 GROUP BY node"
                ).fetchall()
            )
        )
        assert stored == {"gpu-node": 60}  # neither idle nor simulated GPUs are kept
    finally:
        store.close()
