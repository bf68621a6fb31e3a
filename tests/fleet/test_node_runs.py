"""Load generated on node ``b``, next to its llama-server, and recorded by the control plane
(this test, in the root namespace): the default of ``infer-top bench --node --engine-id``,
then the same sweep through b's agent (``--via-proxy``) into the same store, b's engine
telemetry kept with each run, and the two runs compared (``infer-top compare``); a link cut for 10 s mid-run loses and duplicates no record; a run left early stops on b."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
import time
from pathlib import Path

import pytest

from agents.client import AgentClient
from agents.protocol import EngineInfo
from control.noderuns import run_on_node
from loadgen.profiles import LoadSpec, concurrency_sweep
from loadgen.workload import Workload
from runs.events import ProgressEvent
from runs.records import RequestRecord
from store import RunRecorder, open_store
from tests.fleet.conftest import write_config
from tests.loadgen.conftest import ROOT, bench, infer_top_argv
from tests.netns import TestNode, link_cut
from tests.recording import Seen
from tests.waiting import apoll_until

pytestmark = [pytest.mark.netns, pytest.mark.docker]  # docker: the rig's llama-server and model

CUT_S = 10.0


def stored(db: Path) -> tuple[list[tuple[object, ...]], list[tuple[int, int]], int]:
    with sqlite3.connect(db) as conn:
        runs = conn.execute("SELECT node, deployment_id, status, profile_json FROM runs")
        ids = conn.execute("SELECT level_index, request_index FROM requests").fetchall()
        rejected = conn.execute("SELECT count(*) FROM rejected_rows").fetchone()[0]
        return runs.fetchall(), ids, rejected


def node_local_on_b(profile_json: object) -> bool:
    placement = json.loads(str(profile_json))["placement"]
    return bool(placement == {"engine_node": "b", "load_node": "b", "path": "node-local"})


def loads_seen_inside(node: TestNode) -> list[dict[str, object]]:
    """The node's load runs, asked from inside it (while its link is down)."""
    ask = (
        "import json, sys, urllib.request as u; "
        f"r = u.Request('{node.agent_url}/v1/loads', "
        f"headers={{'Authorization': 'Bearer {node.token}'}}); "
        "sys.stdout.write(u.urlopen(r, timeout=5).read().decode())"
    )
    answer = node.run("python3", "-c", ask)
    loads: list[dict[str, object]] = json.loads(answer.stdout)["loads"]
    return loads


def newest_load_inside(node: TestNode) -> dict[str, object]:
    """The node's newest load run (an earlier test's runs on the node are listed too)."""
    return max(loads_seen_inside(node), key=lambda load: float(str(load["started_at"])))


async def test_bench_on_b_generates_the_sweep_there_and_stores_every_record_here(
    fleet: dict[str, TestNode], llama_on_b: EngineInfo, tmp_path: Path
) -> None:
    config = write_config(tmp_path / "config.toml", fleet)
    db = tmp_path / "runs.db"
    code, _out, err = await bench(
        "--config", str(config), "--node", "b", "--engine-id", llama_on_b.id,
        "--concurrency", "1,2,4", "--requests", "4", "--input-len", "16", "--output-len", "8",
        "--save", "--db", str(db),
    )  # fmt: skip
    assert code == 0, err
    runs, ids, rejected = stored(db)
    [(node, deployment_id, status, profile)] = runs
    assert (node, deployment_id, status) == ("b", llama_on_b.id, "completed")
    assert node_local_on_b(profile)
    assert len(ids) == len(set(ids)) == 3 * 4 and rejected == 0

    # The same sweep from here through b's agent, into the same store, and the two compared.
    code, _out, err = await bench(
        "--config", str(config), "--node", "b", "--engine-id", llama_on_b.id, "--via-proxy",
        "--concurrency", "1,2,4", "--requests", "4", "--input-len", "16", "--output-len", "8",
        "--save", "--db", str(db),
    )  # fmt: skip
    assert code == 0, err
    with sqlite3.connect(db) as conn:
        rows = conn.execute(
            "SELECT id, node, json_extract(profile_json, '$.placement.path'),"
            # b's engine telemetry (a frame a second): one before each run, one after it
            " (SELECT count(e.ts BETWEEN runs.created_at - 5 AND runs.created_at OR NULL) > 0"
            "  AND count(e.ts BETWEEN runs.finished_at AND runs.finished_at + 5 OR NULL) > 0"
            "  FROM engine_samples e WHERE e.node = runs.node"
            "  AND e.engine_id = runs.deployment_id)"
            " FROM runs ORDER BY created_at"
        ).fetchall()
    assert [(node, path) for _id, node, path, *_ in rows] == [("b", "node-local"), ("b", "proxied")]
    assert all(spanned == 1 for *_, spanned in rows), rows
    proc = await asyncio.create_subprocess_exec(
        *infer_top_argv("compare", "--json", "--db", str(db), "--baseline", rows[0][0], rows[1][0]),
        cwd=ROOT, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err_bytes = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode in (0, 1), err_bytes.decode()  # 2: the runs could not be compared
    verdict = json.loads(out)
    assert (verdict["baseline"], verdict["run"]) == (rows[0][0], rows[1][0])
    assert [level["level"] for level in verdict["levels"]] == ["c=1", "c=2", "c=4"], verdict


async def test_a_link_down_for_ten_seconds_mid_run_loses_and_duplicates_nothing(
    fleet: dict[str, TestNode], llama_on_b: EngineInfo, tmp_path: Path
) -> None:
    b = fleet["b"]
    db = tmp_path / "runs.db"
    store = open_store(db)
    seen = Seen(RunRecorder(store))
    spec = LoadSpec(levels=concurrency_sweep([1, 2, 4]), requests_per_level=24)
    try:
        async with AgentClient(b.agent_url, b.token) as client:
            run = run_on_node(
                client, llama_on_b.id, spec, Workload(input_len=16, output_len=32), seen,
                model=str(llama_on_b.config["model"]), read_timeout_s=3.0,
            )  # fmt: skip

            async def follow() -> list[ProgressEvent]:
                async with contextlib.aclosing(run):
                    return [event async for event in run]

            # Read all the while: the cut breaks the stream here, and it is resumed.
            following = asyncio.create_task(follow())
            try:
                await apoll_until(lambda: len(seen.keys) >= 3, "b's first records here")
                cut_at = len(seen.keys)
                with link_cut(b):
                    down_at = time.monotonic()
                    # The run goes on on b while it is cut off from here. The link stays
                    # down until b has visibly moved on (a busy 2-core CI machine makes the
                    # tiny model slow), and for at least CUT_S.
                    await apoll_until(
                        lambda: int(str(newest_load_inside(b)["last_seq"])),
                        "b's run to go on while its link is down",
                        done=lambda seq: seq > len(seen.events) + 2,
                        timeout_s=60,
                        every_s=0.5,
                    )
                    await apoll_until(
                        lambda: time.monotonic() - down_at >= CUT_S,
                        f"{CUT_S:g} s with b cut off",
                        every_s=0.5,
                    )
                    assert len(seen.keys) < 3 * 24, "the run should still go on"
                ends = await asyncio.wait_for(following, 240)
            finally:
                following.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await following
    finally:
        store.close()
    assert type(ends[-1]).__name__ == "RunFinished", ends[-1]
    assert cut_at < len(seen.keys) == len(set(seen.keys)) == 3 * 24  # each one, once
    runs, ids, rejected = stored(db)
    [(node, _deployment, status, profile)] = runs
    assert (node, status) == ("b", "completed") and node_local_on_b(profile)
    assert sorted(ids) == sorted(seen.keys) and rejected == 0


async def test_a_run_left_early_stops_on_b_and_keeps_its_finished_records(
    fleet: dict[str, TestNode], llama_on_b: EngineInfo, tmp_path: Path
) -> None:
    b = fleet["b"]
    db = tmp_path / "runs.db"
    store = open_store(db)
    recorder = RunRecorder(store)
    seen = Seen(recorder)
    spec = LoadSpec(levels=concurrency_sweep([2]), requests_per_level=1000)
    try:
        async with AgentClient(b.agent_url, b.token) as client:
            run = run_on_node(
                client, llama_on_b.id, spec, Workload(input_len=16, output_len=256), seen,
                model=str(llama_on_b.config["model"]),
            )  # fmt: skip
            async with contextlib.aclosing(run):
                async for _ in run:
                    if len(seen.keys) >= 2:
                        break
            node_runs = await client.loads()
    finally:
        store.close()
    assert recorder.status == "interrupted", recorder.reason
    assert [r.state for r in node_runs if r.run_id == recorder.run_id] == ["RunInterrupted"]
    records = [e for e in seen.events if isinstance(e, RequestRecord)]
    assert sum(r.ok and not r.incomplete for r in records) >= 2  # the finished ones kept
    assert any(r.incomplete for r in records)  # the cut ones recorded as cut
    runs, ids, rejected = stored(db)
    assert runs[0][2] == "interrupted" and len(ids) == len(records) and rejected == 0
