"""An engine's image on a Compose start: a present one is used without asking a registry
(and the start says so), a missing one is pulled with its layer progress reported, and one
that cannot be had fails the start with how to get it. Driven through ``infer-top engine``
against a real agent and the real Docker daemon (this machine has no registry)."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from agents.config import AgentConfig
from agents.embedded import embedded_agent
from agents.protocol import ImagePull
from agents.runtime.images import PullProgress

from .conftest import containers, docker, llama, volume_exists

ROOT = Path(__file__).resolve().parents[2]
PULL_CAPTURE = ROOT / "tests" / "fixtures" / "docker" / "pull-alpine.jsonl"
"""A real ``docker pull alpine:latest`` message stream (Engine API ``/images/create``) as a
Go client printed it, copied from a public course repository's notes (Slurm golang-main
8.2); one layer of 3,408,729 bytes."""


def test_the_pull_progress_follows_dockers_own_messages() -> None:
    progress = PullProgress("alpine:latest")
    seen = [progress.feed(json.loads(line)) for line in PULL_CAPTURE.read_text().splitlines()]
    halfway = next(p for p in seen if p.done_bytes == 1617145)
    assert (halfway.total_bytes, halfway.layers_done, halfway.layers_total) == (3408729, 0, 1)
    assert halfway.fraction == pytest.approx(1617145 / 3408729)
    assert halfway.describe() == "pulling image alpine:latest: 2 of 3 MiB, 0 of 1 layers done"
    last = seen[-1]
    assert (last.done_bytes, last.layers_done, last.fraction) == (3408729, 1, 1.0)
    assert progress.view("pulled").describe() == "image alpine:latest pulled"
    done_bytes = [p.done_bytes for p in seen]
    assert done_bytes == sorted(done_bytes)  # never goes backwards


async def engine_cli(config: Path, *argv: str) -> tuple[int, str, str]:
    """``infer-top engine ARGV`` in a subprocess (the agent serves in this event loop)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tui.cli", "engine", *argv, "--config", str(config),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 240)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


def node_config(tmp_path: Path, url: str, token: str) -> Path:
    token_file = tmp_path / "node.token"
    token_file.write_text(token + "\n")
    token_file.chmod(0o600)
    config = tmp_path / "config.toml"
    config.write_text(f'[[nodes]]\nname = "n"\nurl = "{url}"\ntoken_file = "{token_file}"\n')
    return config


def image_pulls_since(since: float) -> list[dict[str, Any]]:
    """Docker's own record of image pulls on this daemon since ``since`` (epoch s)."""
    out = docker(
        "events", "--since", f"{since:.3f}", "--until", f"{time.time():.3f}",
        "--filter", "type=image", "--filter", "event=pull", "--format", "{{json .}}",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    return [json.loads(line) for line in out.stdout.splitlines() if line.strip()]


@pytest.mark.docker
async def test_a_present_image_is_used_without_a_pull_and_the_start_says_so(
    rig: Any, node: str, cache_volume: str, docker_config: AgentConfig, tmp_path: Path
) -> None:
    began = time.time()
    async with embedded_agent(docker_config) as (url, token):
        config = node_config(tmp_path, url, token)
        launch = llama(rig, 2)
        rc, out, err = await engine_cli(
            config, "start", "llamacpp", "--runtime", "compose", "--model", launch["model"],
            "--image", rig.llama_image, "--max-num-seqs", "2", "--context-len", "256", "--json",
        )  # fmt: skip
        assert rc == 0, err
        engine = json.loads(out)["engine"]
        assert engine["image_pull"] == {
            "image": rig.llama_image,
            "state": "present",
            "done_bytes": None,
            "total_bytes": None,
            "layers_done": None,
            "layers_total": None,
        }
        assert image_pulls_since(began) == []  # no registry was asked
        assert engine["volumes"] == [cache_volume]

        # stop --remove-volumes names what it deletes, then deletes it
        rc, out, err = await engine_cli(config, "stop", engine["id"], "--remove-volumes", "--json")
        assert rc == 0, err
        assert f"removing volumes of {engine['id']} (their data is deleted): {cache_volume}" in err
        stopped = json.loads(out)
        assert (stopped["volumes_removed"], stopped["volumes_kept"]) == ([cache_volume], [])
        assert not await volume_exists(cache_volume)
        assert containers(node) == []


@pytest.mark.docker
@pytest.mark.parametrize(
    ("image", "how"),
    [
        ("infer-top/no-such-engine:0", "run scripts/rig.sh on node"),
        ("example.invalid/no-such/engine:0", "run `docker pull example.invalid/no-such/engine:0`"),
    ],
)
async def test_a_missing_image_fails_the_start_saying_how_to_get_it(
    rig: Any,
    node: str,
    docker_config: AgentConfig,
    tmp_path: Path,
    image: str,
    how: str,
) -> None:
    allowed = replace(docker_config, allowed_images=frozenset({image}))
    async with embedded_agent(allowed) as (url, token):
        config = node_config(tmp_path, url, token)
        rc, out, err = await engine_cli(
            config, "start", "llamacpp", "--runtime", "compose", "--model", "/models/tiny.gguf",
            "--image", image, "--json",
        )  # fmt: skip
        assert rc == 1, err
        error = json.loads(out)["error"]
        assert (error["code"], error["phase"]) == ("start_failed", "starting")
        message = error["engine"]["message"]
        assert f"image {image} is not on node {node} and pulling it failed" in message
        assert how in message and how in err
        pull = ImagePull(**error["engine"]["image_pull"])
        assert (pull.image, pull.state) == (image, "pulling")  # it was tried, not skipped
        assert containers(node) == []  # compose never ran it
        rc, _, err = await engine_cli(config, "stop", error["engine"]["id"])
        assert rc == 0, err
