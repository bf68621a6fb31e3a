"""The rig's first end-to-end check: the real llama-server image under
``docker compose``, one streamed chat completion with usage, clean teardown."""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from compose import LABEL_DEPLOYMENT, compose_file
from tests.conftest import Rig
from tests.ports import free_port
from tests.waiting import poll_until

pytestmark = pytest.mark.docker


def project_containers(project: str, *, stopped_too: bool = False) -> list[str]:
    return subprocess.run(
        ["docker", "ps", "-aq" if stopped_too else "-q",
         "--filter", f"label=com.docker.compose.project={project}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()  # fmt: skip


def health_status(project: str) -> str:
    """Docker's health status of the project's first container ("" while there is none)."""
    ids = project_containers(project)
    if not ids:
        return ""
    return subprocess.run(
        ["docker", "inspect", "-f", "{{.State.Health.Status}}", ids[0]],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


def wait_healthy(project: str, timeout_s: float = 90.0) -> None:
    poll_until(
        lambda: health_status(project),
        f"{project} to be healthy",
        done=lambda status: status == "healthy",
        timeout_s=timeout_s,
        every_s=0.5,
    )


async def stream_chat(port: int) -> list[dict[str, Any]]:
    body = {
        "model": "tiny",
        "messages": [{"role": "user", "content": "Say something about the sea."}],
        "max_tokens": 16,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    events: list[dict[str, Any]] = []
    async with aiohttp.ClientSession() as session:
        async with session.post(f"http://127.0.0.1:{port}/v1/chat/completions", json=body) as r:
            assert r.status == 200
            async for raw in r.content:
                line = raw.decode().strip()
                if line.startswith("data: ") and line != "data: [DONE]":
                    events.append(json.loads(line[6:]))
                elif line == "data: [DONE]":
                    events.append({"done": True})
    return events


def test_stream_chat_with_usage_then_teardown(
    rig: Rig, compose_project: str, tmp_path: Path
) -> None:
    port = free_port()
    env = tmp_path / "engine.env"
    env.write_text(
        f"ENGINE_IMAGE={rig.llama_image}\nENGINE_PORT={port}\nPARALLEL=2\n"
        f"CONTEXT_LEN=4096\nDEPLOYMENT_ID=e2e-{compose_project}\n"
    )
    cmd = [
        *rig.compose,
        "-f",
        str(compose_file("llama-server-cpu")),
        "-p",
        compose_project,
        "--env-file",
        str(env),
    ]
    subprocess.run([*cmd, "up", "-d"], check=True, capture_output=True, timeout=120)
    wait_healthy(compose_project)

    events = asyncio.run(stream_chat(port))

    assert events[-1] == {"done": True}, "stream must end with [DONE]"
    content = [
        e
        for e in events
        if e.get("choices") and (e["choices"][0].get("delta") or {}).get("content")
    ]
    usage = [e for e in events if e.get("usage") and not e.get("choices")]
    assert len(content) >= 8, f"expected content chunks, got {len(content)}"
    assert len(usage) == 1, "exactly one usage chunk with empty choices"
    assert usage[0]["usage"]["completion_tokens"] == 16
    assert usage[0]["usage"]["prompt_tokens"] > 0
    # The deployment label is how an agent finds its projects again.
    labels = subprocess.run(
        [
            "docker",
            "ps",
            "--filter",
            f"label=com.docker.compose.project={compose_project}",
            "--format",
            '{{.Label "' + LABEL_DEPLOYMENT + '"}}',
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert labels == [f"e2e-{compose_project}"]

    subprocess.run([*cmd, "down", "-v", "-t", "2"], check=True, capture_output=True, timeout=120)
    left = project_containers(compose_project, stopped_too=True)
    assert left == [], f"containers left behind: {left}"
