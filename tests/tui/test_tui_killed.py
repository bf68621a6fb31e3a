"""``kill -9`` of the TUI itself in the middle of a load test: the real ``infer-top``
process in a real terminal (tmux), its Load screen running a long sweep against a
simulated engine of a real ``infer-agent`` process.  What it had stored stays: the file
is sound, every finished request whole, and the run is listed ``interrupted`` (never
``completed``, never gone) by the next ``infer-top runs list``."""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agents.client import AgentClient
from store import open_store
from tests.loadgen.test_bench_process import stored_requests
from tests.ports import free_port
from tests.tui.tmux import Tmux
from tests.waiting import apoll_until, poll_until

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "tui-killed-token-0123456789"
NODE = "kill-node"
OUTPUT_LEN = 24
REQUESTS = 400
"""Far more than are stored before the kill on any machine: the run is surely mid-way."""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture
async def agent(tmp_path: Path) -> AsyncIterator[AgentClient]:
    """A real ``infer-agent`` (replayed GPUs) on 127.0.0.1, with one simulated engine."""
    port = free_port()
    token_file = tmp_path / "agent.token"
    token_file.write_text(TOKEN)
    token_file.chmod(0o600)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "agents.cli", "--listen", f"127.0.0.1:{port}",
        "--token-file", str(token_file), "--replay-trace", "--platform", "replay",
        "--interval", "500ms", "--state-dir", str(tmp_path / "state"), "--node-name", NODE,
        cwd=ROOT, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    client = AgentClient(f"http://127.0.0.1:{port}", TOKEN)
    try:
        await apoll_until(client.node_info, "the agent", ignoring=(Exception,), timeout_s=60)
        yield client
    finally:
        for load in await client.loads():  # the load it ran for the killed TUI
            if load.state == "running":
                await client.cancel_load(load.run_id)
        await client.close()
        proc.terminate()
        await asyncio.wait_for(proc.wait(), 30)


async def test_a_sigkilled_tui_leaves_its_run_interrupted_and_every_stored_request_whole(
    agent: AgentClient, tmux: Tmux, tmp_path: Path
) -> None:
    engine = await agent.start("sim", {"profile": "h100-llama2-7b-vllm"}, [0], runtime="sim")
    assert engine.health == "healthy", engine.message
    db = tmp_path / "runs.db"
    config = tmp_path / "config.toml"
    config.write_text(
        f'[[nodes]]\nname = "{NODE}"\nurl = "{agent.base_url}"\n'
        f'token_file = "{tmp_path / "agent.token"}"\n[store]\npath = "{db}"\n'
        # the Load screen's first profile, made long: it is still running when killed
        f"[load.profiles.smoke]\nconcurrency = [2]\nrequests = {REQUESTS}\n"
        f"input_len = 32\noutput_len = {OUTPUT_LEN}\n"
    )
    env = " ".join(
        f"{k}={tmp_path / k.lower()}"
        for k in ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME")
    )
    # exec: the pane's process is infer-top itself, the one to kill
    tmux.start(
        f"cd {ROOT} && exec env -u COLUMNS -u LINES TERM=xterm-256color {env} "
        f"PYTHONPATH={ROOT} {sys.executable} -m tui.cli --config {config}"
    )
    pid = int(tmux.run("display-message", "-p", "-t", "demo", "#{pane_pid}").strip())
    tmux.wait_for(NODE, timeout_s=60)
    tmux.keys("4")
    tmux.wait_for("SIM", timeout_s=60)  # the simulated engine offered as the target
    tmux.keys("r")
    tmux.wait_for("starting", timeout_s=60)
    poll_until(
        lambda: stored_requests(db), "10 requests stored", done=lambda n: n >= 10, timeout_s=120
    )

    os.kill(pid, signal.SIGKILL)
    poll_until(lambda: not _alive(pid), "the TUI to be gone", timeout_s=30)
    stored = stored_requests(db)

    conn = sqlite3.connect(db)  # as the kill left it: the WAL not yet checkpointed
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    finally:
        conn.close()
    lister = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tui.cli", "runs", "list", "--db", str(db),
        cwd=ROOT, stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, _ = await asyncio.wait_for(lister.communicate(), 120)
    assert lister.returncode == 0
    listed = out.decode()
    with open_store(db) as st:
        (run,) = st.list_runs()
        records = list(st.iter_requests(run.run_id))
    assert run.status == "interrupted", run
    assert run.profile["origin"] == "tui"
    assert 10 <= run.request_count == stored == len(records) < REQUESTS
    assert all(r.ok and r.output_tokens == OUTPUT_LEN for r in records if not r.incomplete)
    row = next(line for line in listed.splitlines() if run.run_id in line)
    assert "interrupted" in row and f" {stored} " in row, listed
