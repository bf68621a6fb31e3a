"""Quitting the demo stops every engine it started: its simulators and the real llama.cpp
container the demo offers when the rig's image is here.  Before, the container outlived
the demo (the agent leaves Compose engines for the next agent to adopt, and no agent
adopts a demo's), serving on and holding its GPU."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import aiohttp
import psutil
import pytest
from textual.widgets import Select

from control.demo import LIVE_SIMS, DemoOptions, RealEngine, demo_services
from tests.conftest import Rig
from tests.tui.conftest import SIZE
from tests.tui.driving import wait_for_action
from tests.tui.helpers import type_into, wait_until
from tests.waiting import apoll_until
from tui.app import create_app


def _docker(*argv: str) -> str:
    done = subprocess.run(["docker", *argv], capture_output=True, text=True, timeout=60, check=True)
    return done.stdout.strip()


def _containers(deployment_id: str) -> list[str]:
    return _docker(
        "ps", "-aq", "--filter", f"label=org.infer-top.deployment={deployment_id}"
    ).split()


def _remove(deployment_id: str) -> None:
    if leftover := _containers(deployment_id):
        subprocess.run(["docker", "rm", "-f", *leftover], capture_output=True, timeout=60)


async def _answers(url: str) -> bool:
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session:
            async with session.get(f"{url.rstrip('/')}/v1/models"):
                return True
    except (aiohttp.ClientError, TimeoutError):
        return False


@pytest.mark.docker
async def test_quitting_the_demo_stops_its_real_engine_and_its_simulators(
    rig: Rig, tmp_path: Path
) -> None:
    said: list[str] = []
    options = DemoOptions(gpus=1, db=tmp_path / "demo.db", runs=False)
    started: list[str] = []
    try:
        async with demo_services(options, RealEngine(rig.llama_image), said.append) as (
            config,
            services,
        ):
            app = create_app(config, services=services)
            client: Any = services.nodes[0].client
            async with app.run_test(size=SIZE) as pilot:
                # as the demo's banner says: press 3, model /models/tiny.gguf, s
                await pilot.press("3")
                app.screen.query_one("#kind", Select).value = "llamacpp"
                app.screen.query_one("#runtime", Select).value = "compose"
                await type_into(pilot, "#model", "/models/tiny.gguf")
                await type_into(pilot, "#context", "512")
                await pilot.click("#start")
                await wait_for_action(pilot, "healthy", "llama-server healthy", timeout_s=180)
                engines = await apoll_until(
                    client.engines,
                    "the simulators beside it",
                    done=lambda engines: len(engines) == len(LIVE_SIMS) + 1,
                )
                (real,) = [e for e in engines if not e.simulated]
                started = [real.id]
                (container,) = _containers(real.id)
                pid = int(_docker("inspect", "-f", "{{.State.Pid}}", container))
                engine_process = psutil.Process(pid)
                urls = [e.url for e in engines if e.url]
                assert len(urls) == len(engines)
                await pilot.press("q")
                await wait_until(pilot, lambda: not app.is_running, "the demo to quit")
        # the demo has exited: nothing it started is left
        assert _containers(real.id) == []
        assert not engine_process.is_running(), engine_process  # gone from the process table
        assert [url for url in urls if await _answers(url)] == []
        assert f"stopping the demo's {len(engines)} engine(s)" in said, said
    finally:
        for deployment_id in started:
            _remove(deployment_id)
