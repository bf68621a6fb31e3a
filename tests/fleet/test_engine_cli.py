"""``infer-top engine`` as a script runs it: the real command (a subprocess), a node ``a``
(a network namespace with its own ``infer-agent``) named in a config file, and the rig's
real llama-server started, listed, tailed, swapped and stopped through the agent; then
every way it fails, each with its words and exit code."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Rig
from tests.fleet.conftest import write_config
from tests.netns import TestNode, network_nodes
from tests.ports import free_port

pytestmark = [pytest.mark.netns, pytest.mark.docker]  # docker: the rig's llama-server and model

ROOT = Path(__file__).resolve().parents[2]
COMMAND_TIMEOUT_S = 240


@pytest.fixture(scope="module")
def node_a(rig: Rig, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestNode]:
    """Node ``a``, whose agent may run the rig's llama-server on models from the rig and
    from a directory holding a file that is no model at all."""
    workdir = tmp_path_factory.mktemp("engine-cli")
    broken = workdir / "broken-models"
    broken.mkdir()
    (broken / "not-a-model.gguf").write_bytes(b"this is not a GGUF file\n" * 64)
    natives = {"llamacpp": rig.llama_server_bin}
    model_dirs = (rig.tiny_model.resolve().parent, broken)
    with network_nodes(("a",), workdir, natives=natives, model_dirs=model_dirs) as nodes:
        yield nodes["a"]


@pytest.fixture(scope="module")
def config(node_a: TestNode, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_config(tmp_path_factory.mktemp("cfg") / "config.toml", {"a": node_a})


def engine_cli(*argv: str, config: Path) -> subprocess.CompletedProcess[str]:
    """``infer-top engine ARGV`` with this worktree's code, as a shell would run it."""
    return subprocess.run(
        [sys.executable, "-m", "tui.cli", "engine", *argv, "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_S,
        env={**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"},
    )


def json_of(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(done.stdout)
    return data


def slots_inside(node: TestNode, url: str) -> int:
    """llama-server's slot count, asked on the node itself (it binds the node's loopback)."""
    script = f"import urllib.request as u, json; print(len(json.load(u.urlopen('{url}/slots'))))"
    done = node.run("python3", "-c", script)
    return int(done.stdout)


def test_start_ls_logs_swap_stop_a_real_llama_server(
    node_a: TestNode, config: Path, rig: Rig
) -> None:
    model = rig.tiny_model.resolve().name
    launch = ["--model", model, "--context-len", "512", "--extra-arg=--threads=1"]
    start = engine_cli(
        "start", "llamacpp", "--runtime", "process", *launch, "--max-num-seqs", "2",
        "--health-timeout", "2m", "--json", config=config,
    )  # fmt: skip
    assert start.returncode == 0, start.stderr
    started = json_of(start)
    engine = started["engine"]
    engine_id = engine["id"]
    try:
        assert (started["ok"], started["node"], started["action"]) == (True, "a", "start")
        assert (engine["kind"], engine["health"]) == ("llamacpp", "healthy")
        assert engine["start_timeout_s"] == 120  # --health-timeout reached the agent's gate
        assert started["elapsed_s"] > 0
        assert "healthy" in start.stderr  # progress went to stderr, JSON alone to stdout
        assert slots_inside(node_a, engine["url"]) == 2

        # ls, as JSON and as a table (--node left out: the config names one node)
        listed = engine_cli("ls", "--json", config=config)
        assert listed.returncode == 0, listed.stderr
        (row,) = json_of(listed)["engines"]
        assert (row["id"], row["health"], row["model"]) == (engine_id, "healthy", engine["model"])
        table = engine_cli("ls", "--node", "a", config=config)
        assert table.returncode == 0 and engine_id in table.stdout and "healthy" in table.stdout

        # logs: the tail, and a bounded follow that ends by itself
        logs = engine_cli("logs", engine_id, "--tail", "50", config=config)
        assert logs.returncode == 0, logs.stderr
        assert "server is listening" in logs.stdout or "listening" in logs.stdout, logs.stdout
        follow = engine_cli("logs", engine_id, "-f", "--for", "2s", "--tail", "3", config=config)
        assert follow.returncode == 0, follow.stderr
        assert 1 <= len(follow.stdout.splitlines()) <= 3

        # swap: the same engine, three slots; the id and port stay and it reports the time
        swap = engine_cli(
            "swap", engine_id, *launch, "--max-num-seqs", "3", "--health-timeout", "90s",
            "--json", config=config,
        )  # fmt: skip
        assert swap.returncode == 0, swap.stderr
        swapped = json_of(swap)
        assert swapped["engine"]["id"] == engine_id
        assert swapped["engine"]["port"] == engine["port"]
        assert swapped["engine"]["health"] == "healthy"
        assert swapped["engine"]["start_timeout_s"] == 90  # the swap's own health wait
        assert swapped["previous"] == {"kind": "llamacpp", "model": engine["model"]}
        assert swapped["swap_s"] > 0
        assert slots_inside(node_a, engine["url"]) == 3  # the new configuration really runs
    finally:
        stop = engine_cli("stop", engine_id, "--json", config=config)
    assert stop.returncode == 0, stop.stderr
    assert json_of(stop) == {
        "ok": True,
        "node": "a",
        "action": "stop",
        "engine_id": engine_id,
        "volumes_kept": [],
        "volumes_removed": [],
    }
    assert json_of(engine_cli("ls", "--json", config=config))["engines"] == []


def test_a_start_that_fails_says_in_which_phase_and_its_last_log_line(
    node_a: TestNode, config: Path
) -> None:
    start = engine_cli(
        "start", "llamacpp", "--runtime", "process", "--model", "not-a-model.gguf",
        "--extra-arg=--threads=1", "--health-timeout", "2m", "--json", config=config,
    )  # fmt: skip
    failed = json_of(start)
    engine_id = failed.get("error", {}).get("engine", {}).get("id")
    try:
        assert start.returncode == 1, start.stderr
        error = failed["error"]
        assert (failed["ok"], error["code"]) == (False, "start_failed")
        assert error["phase"] in ("starting", "loading")
        assert error["last_log_line"], error
        assert error["engine"]["state"] == "crashed"
        assert f"crashed while {error['phase']}" in start.stderr
        assert error["last_log_line"] in start.stderr
        assert f"infer-top engine stop {engine_id}" in start.stderr
    finally:
        if engine_id:
            engine_cli("stop", engine_id, config=config)


def test_refusals_and_unreachable_agents_exit_non_zero_with_words(
    node_a: TestNode, config: Path, rig: Rig, tmp_path: Path
) -> None:
    unknown = engine_cli("ls", "--node", "nope", "--json", config=config)
    assert unknown.returncode == 2
    assert "no node 'nope'" in unknown.stderr and "(nodes: a)" in unknown.stderr
    assert json_of(unknown)["error"]["code"] == "config"

    policy = engine_cli(
        "start", "llamacpp", "--runtime", "compose", "--model", "/models/tiny.gguf",
        "--image", "someone/else:latest", "--json", config=config,
    )  # fmt: skip
    assert policy.returncode == 4, policy.stderr
    assert json_of(policy)["error"]["code"] == "refused_by_policy"
    assert "refused by policy" in policy.stderr and "not allow-listed" in policy.stderr

    missing = engine_cli("stop", "0000000000", config=config)
    assert missing.returncode == 4 and "no engine '0000000000'" in missing.stderr

    # a node whose agent is not there (an unused port on this machine's loopback)
    nowhere = tmp_path / "nowhere.toml"
    nowhere.write_text(
        f'[[nodes]]\nname = "gone"\nurl = "http://127.0.0.1:{free_port()}"\n'
        f'token_file = "{node_a.token_file}"\n'
    )
    gone = engine_cli("ls", "--json", config=nowhere)
    assert gone.returncode == 3
    assert json_of(gone)["error"]["code"] == "unreachable"
    assert "node gone" in gone.stderr and "unreachable" in gone.stderr
