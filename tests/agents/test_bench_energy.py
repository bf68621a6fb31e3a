"""A headless ``infer-top bench`` against an engine an agent runs stores the GPU energy of
the run's window, so the comparison has tok/J as for a TUI run; against a bare ``--url``
(no agent to ask) and on replayed GPUs the energy is n/a, never 0.

No GPU here: the measured agent's GPUs are the real H200 NVML recording presented as
measured (``NvmlCollector`` over ``ReplayNvml`` with ``simulated=False``) — the stand-in
for absent hardware at the NVML boundary; the agent, its telemetry stream, the engine (the
simulator) and the bench process are the real ones."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from agents.client import AgentClient
from agents.collectors.nvml import NvmlCollector
from agents.collectors.replay import ReplayNvml
from agents.config import AgentConfig, bundled_trace
from agents.server import create_app
from store import open_store
from store.models import ComparisonRow
from tests.loadgen.conftest import ROOT, bench, infer_top_argv

from .conftest import TOKEN
from .test_loadruns import SIM
from .test_node_runs import node_config

LOAD = ("--concurrency", "1,2", "--duration", "1.5s", "--input-len", "16", "--output-len", "8")
"""Levels of 1.5 s: several 0.2 s frames in each window."""


@pytest.fixture
async def measured_agent(
    make_config: Callable[..., AgentConfig],
) -> AsyncIterator[tuple[str, AgentClient]]:
    """An agent on 127.0.0.1:<free> whose GPU reads as measured."""
    gpu = NvmlCollector(ReplayNvml(bundled_trace(), gpus=1), simulated=False)
    runner = web.AppRunner(create_app(make_config(), gpu=gpu), handle_signals=False)
    await runner.setup()
    try:
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        url = f"http://127.0.0.1:{runner.addresses[0][1]}"
        async with AgentClient(url, TOKEN) as client:
            yield url, client
    finally:
        await runner.cleanup()


def stored_levels(db: Path) -> list[ComparisonRow]:
    store = open_store(db)
    try:
        [run] = store.list_runs()
        return list(store.compare([run.run_id]).rows)
    finally:
        store.close()


async def infer_top_json(*argv: str) -> Any:
    proc = await asyncio.create_subprocess_exec(
        *infer_top_argv(*argv), cwd=ROOT, stdout=asyncio.subprocess.PIPE
    )
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), 60)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode == 0
    return json.loads(out)


@pytest.mark.parametrize("how", [(), ("--via-proxy",)], ids=["on-node", "generated-here"])
async def test_bench_on_an_agents_engine_stores_energy_and_tok_per_joule(
    measured_agent: tuple[str, AgentClient], tmp_path: Path, how: tuple[str, ...]
) -> None:
    url, client = measured_agent
    engine = await client.start("sim", SIM)
    db = tmp_path / "runs.db"
    code, _out, err = await bench(
        "--config", str(node_config(tmp_path, url)), "--node", "testnode",
        "--engine-id", engine.id, *how, *LOAD, "--save", "--db", str(db),
    )  # fmt: skip
    assert code == 0, err
    assert "n/a" not in err, err
    rows = stored_levels(db)
    assert [r.concurrency for r in rows] == [1, 2]
    for row in rows:
        assert row.energy_source == "telemetry", row
        assert row.energy_j is not None and row.energy_j > 0
        # one replayed H200 (at most ~700 W) over a window of about 1.5 s
        assert row.energy_j < 700 * (row.ended_at - row.started_at + 1)
        assert row.tok_per_j == row.total_output_tokens / row.energy_j > 0
        assert row.mean_power_w is not None and row.mean_gpu_util_pct is not None


async def test_bench_on_replayed_gpus_stores_no_energy(
    agent: tuple[str, AgentClient], tmp_path: Path
) -> None:
    url, client = agent  # the demo's agent: its GPUs are replayed, marked simulated
    engine = await client.start("sim", SIM)
    db = tmp_path / "runs.db"
    code, _out, err = await bench(
        "--config", str(node_config(tmp_path, url)), "--node", "testnode",
        "--engine-id", engine.id, *LOAD, "--save", "--db", str(db),
    )  # fmt: skip
    assert code == 0, err
    assert "replayed (simulated): no energy or tok/J recorded" in " ".join(err.split())
    for row in stored_levels(db):
        assert row.energy_j is None and row.tok_per_j is None and row.mean_power_w is None


async def test_bench_against_a_bare_url_stores_energy_as_n_a(
    measured_agent: tuple[str, AgentClient], tmp_path: Path
) -> None:
    _url, client = measured_agent
    engine = await client.start("sim", SIM)
    assert engine.url is not None
    db = tmp_path / "runs.db"
    code, _out, err = await bench("--url", engine.url, *LOAD, "--save", "--db", str(db))
    assert code == 0, err
    rows = stored_levels(db)
    assert len(rows) == 2
    for row in rows:
        assert row.energy_j is None and row.tok_per_j is None and row.energy_source is None
    shown = await infer_top_json("runs", "show", rows[0].run_id, "--json", "--db", str(db))
    assert [(lv["energy_j"], lv["tok_per_j"]) for lv in shown["levels"]] == [(None, None)] * 2
