"""A load run generated on the node and recorded by the control plane (control/noderuns.py)
with a simulated engine on loopback: the connection to the agent goes through a relay the
test cuts mid-run, and every record still reaches SQLite exactly once; leaving the run
early stops it on the node. The multi-host proof (a real llama-server on another node, a
downed link) is tests/fleet/."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
from pathlib import Path

from agents.client import AgentClient
from control.noderuns import run_on_node
from loadgen.profiles import LoadSpec, concurrency_sweep
from loadgen.sinks import read_jsonl
from loadgen.workload import Workload
from runs.records import RequestRecord
from store import RunRecorder, open_store
from tests.loadgen.conftest import ROOT, bench, infer_top_argv
from tests.recording import Seen
from tests.waiting import apoll_until

from .conftest import TOKEN
from .test_loadruns import SIM, events_of, served_model


class Relay:
    """A TCP relay on 127.0.0.1 in front of the agent, which the test can cut (every
    connection dropped, new ones refused) and restore on the same port."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.port = 0
        self.server: asyncio.Server | None = None
        self.writers: set[asyncio.StreamWriter] = set()

    async def open(self) -> None:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)
        self.port = self.server.sockets[0].getsockname()[1]

    async def cut(self) -> None:
        assert self.server is not None
        self.server.close()
        for writer in self.writers:
            writer.transport.abort()
        self.writers.clear()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        self.writers |= {writer, up_writer}

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(ConnectionError):
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            dst.transport.abort()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))


def stored(db: Path) -> tuple[str, dict[str, object], list[tuple[int, int]], int]:
    with sqlite3.connect(db) as conn:
        ((status, profile),) = conn.execute("SELECT status, profile_json FROM runs").fetchall()
        ids = conn.execute("SELECT level_index, request_index FROM requests").fetchall()
        rejected = conn.execute("SELECT count(*) FROM rejected_rows").fetchone()[0]
    return status, json.loads(profile), ids, rejected


async def test_a_cut_connection_loses_no_record_and_stores_none_twice(
    agent: tuple[str, AgentClient], tmp_path: Path
) -> None:
    url, client = agent
    engine = await client.start("sim", SIM)
    relay = Relay(int(url.rsplit(":", 1)[1]))
    await relay.open()
    db = tmp_path / "runs.db"
    store = open_store(db)
    seen = Seen(RunRecorder(store))
    spec = LoadSpec(levels=concurrency_sweep([1, 2]), requests_per_level=30)
    try:
        async with AgentClient(f"http://127.0.0.1:{relay.port}", TOKEN) as far:
            run = run_on_node(
                far, engine.id, spec, Workload(input_len=16, output_len=16), seen,
                model=await served_model(url, engine.id), origin="bench",
            )  # fmt: skip
            async with contextlib.aclosing(run):
                async for _ in run:
                    if len(seen.records) >= 5:
                        break_at = len(seen.events)
                        break
                await relay.cut()
                # The run goes on on the node while the link is down.
                await apoll_until(
                    client.loads,
                    "the node's run to go on without us",
                    done=lambda runs: runs[0].last_seq > break_at + 10,
                    timeout_s=180,  # a bound on a hang: a busy core is slow (see below)
                )
                await relay.open()
                ends = [event async for event in run]
    finally:
        store.close()
    assert type(ends[-1]).__name__ == "RunFinished", ends[-1]
    keys = [(r.level_index, r.request_index) for r in seen.records]
    assert len(keys) == 60 and len(set(keys)) == 60  # every record, once
    status, profile, ids, rejected = stored(db)
    assert status == "completed"
    assert sorted(ids) == sorted(keys) and rejected == 0
    assert profile["placement"] == {
        "engine_node": "testnode",
        "load_node": "testnode",
        "path": "node-local",
    }


async def test_leaving_a_node_run_early_stops_it_there_and_keeps_its_records(
    agent: tuple[str, AgentClient], tmp_path: Path
) -> None:
    url, client = agent
    engine = await client.start("sim", SIM)
    db = tmp_path / "runs.db"
    store = open_store(db)
    recorder = RunRecorder(store)
    seen = Seen(recorder)
    spec = LoadSpec(levels=concurrency_sweep([2]), requests_per_level=10_000)
    try:
        run = run_on_node(
            client, engine.id, spec, Workload(input_len=16, output_len=64), seen,
            model=await served_model(url, engine.id),
        )  # fmt: skip
        async with contextlib.aclosing(run):
            async for _ in run:
                if len(seen.records) >= 3:
                    break
    finally:
        store.close()
    assert recorder.status == "interrupted", recorder.reason
    [node_run] = await client.loads()
    assert node_run.state == "RunInterrupted"  # stopped on the node
    status, _profile, ids, rejected = stored(db)
    assert status == "interrupted" and rejected == 0
    assert len(ids) == len(seen.records) >= 3
    assert any(r.incomplete for r in seen.records)  # the cut ones came back too


def node_config(tmp_path: Path, url: str) -> Path:
    """The operator's config file naming the test's agent as node ``testnode``."""
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    token_file.chmod(0o600)
    config = tmp_path / "config.toml"
    config.write_text(f'[[nodes]]\nname = "testnode"\nurl = "{url}"\ntoken_file = "{token_file}"\n')
    return config


async def test_bench_by_node_and_engine_id_generates_the_load_on_the_node(
    agent: tuple[str, AgentClient], tmp_path: Path
) -> None:
    url, client = agent
    engine = await client.start("sim", SIM)
    config = node_config(tmp_path, url)
    db, jsonl = tmp_path / "runs.db", tmp_path / "requests.jsonl"
    code, _out, err = await bench(
        "--config", str(config), "--node", "testnode", "--engine-id", engine.id,
        "--concurrency", "1,2", "--requests", "4", "--input-len", "16", "--output-len", "8",
        "--save", "--db", str(db), "--jsonl", str(jsonl),
    )  # fmt: skip
    assert code == 0, err
    status, profile, ids, rejected = stored(db)
    assert status == "completed" and len(set(ids)) == len(ids) == 8 and rejected == 0
    assert profile["placement"] == {
        "engine_node": "testnode",
        "load_node": "testnode",
        "path": "node-local",
    }
    assert len(read_jsonl(jsonl)[0]) == 8  # the records reached --jsonl here too
    [node_run] = await client.loads()
    assert node_run.state == "RunFinished"


async def test_bench_stopped_by_sigterm_stops_its_run_on_the_node(
    agent: tuple[str, AgentClient], tmp_path: Path
) -> None:
    url, client = agent
    engine = await client.start("sim", SIM)
    db = tmp_path / "runs.db"
    argv = infer_top_argv(
        "bench", "--quiet", "--config", str(node_config(tmp_path, url)),
        "--node", "testnode", "--engine-id", engine.id, "--concurrency", "2",
        "--requests", "10000", "--input-len", "16", "--output-len", "64",
        "--save", "--db", str(db),
    )  # fmt: skip
    proc = await asyncio.create_subprocess_exec(
        *argv,
        cwd=ROOT,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        # a bound on a hang: pinned to one busy core the run had 2 events after 30 s
        runs = await apoll_until(
            client.loads,
            "the run's first records",
            done=lambda r: r and r[0].last_seq > 20,
            timeout_s=180,
        )
        proc.terminate()
        _out, err = await asyncio.wait_for(proc.communicate(), 90)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode == 143, err.decode()
    [node_run] = await client.loads()
    assert (node_run.run_id, node_run.state) == (runs[0].run_id, "RunInterrupted")
    status, _profile, ids, rejected = stored(db)
    assert status == "interrupted" and len(ids) == len(set(ids)) >= 2 and rejected == 0
    assert len(ids) == sum(
        isinstance(e, RequestRecord) for _, e in await events_of(client, node_run.run_id)
    )  # every record the node kept is stored here
