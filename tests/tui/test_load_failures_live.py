"""Failures with the engine's own reason, on the real llama-server (the rig's binary):
a sweep whose prompts overflow the engine's context, and a run that asks for a model
the engine does not serve, show the engine's message per level on the Load screen and
in ``infer-top bench``, and are stored as failed with that message in the reason.

Before, the Load screen showed ``OK 0 Fail 32`` and the kind (``http_status``) only:
what llama.cpp said was in the records and nowhere on screen or in bench's output."""

from __future__ import annotations

import dataclasses
import json
import subprocess
from collections.abc import AsyncGenerator, AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from control.loads import LoadRequest, profile, run_load
from runs.events import ProgressEvent, RunEventSink
from store import open_store
from telemetry import EngineTelemetry
from tests.conftest import Rig
from tests.loadgen.conftest import bench
from tests.loadgen.test_llama_server_live import _wait_health
from tests.ports import free_port
from tests.tui.conftest import SIZE, fleet_frames, frozen_app, frozen_services
from tests.tui.helpers import text_of, wait_until

pytestmark = pytest.mark.docker  # the rig's llama-server binary and tiny model

CTX_TOKENS = 256
"""The engine's context: the sweep profile's 256 in + 128 out tokens overflow it."""
OVERFLOW = "exceed_context_size_error"
NO_MODEL = "model 'no-such-model' not found"


def _serve(argv: list[str], log: Path) -> Iterator[str]:
    port = free_port()
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [*argv, "--host", "127.0.0.1", "--port", str(port), "-t", "1"],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)


@pytest.fixture
async def small_ctx_server(rig: Rig, tmp_path: Path) -> AsyncIterator[str]:
    """llama-server with a 256-token context."""
    argv = [str(rig.llama_server_bin), "-m", str(rig.tiny_model), "-c", str(CTX_TOKENS)]
    for url in _serve(argv, tmp_path / "llama-server.log"):
        await _wait_health(url)
        yield url


@pytest.fixture
async def router_server(rig: Rig, tmp_path: Path) -> AsyncIterator[str]:
    """llama-server in router mode: it serves the models in a folder, by name, and
    refuses a name it does not have (as a multi-model engine does)."""
    models = tmp_path / "models"
    models.mkdir()
    (models / "tiny.gguf").symlink_to(rig.tiny_model)
    argv = [str(rig.llama_server_bin), "--models-dir", str(models), "-c", str(CTX_TOKENS)]
    for url in _serve(argv, tmp_path / "llama-router.log"):
        await _wait_health(url)
        yield url


def _engine(url: str) -> EngineTelemetry:
    return EngineTelemetry(
        id="llama-a", kind="llamacpp", state="ready", health="healthy", url=url + "/"
    )


def _asking_for(model: str) -> Any:
    """The Load screen's runner, asking the engine for ``model`` (a wrong name)."""

    def runner(request: LoadRequest, record: RunEventSink) -> AsyncGenerator[ProgressEvent, None]:
        return run_load(dataclasses.replace(request, model=model), record)

    return runner


def _lengths_of(name: str) -> Any:
    """The Load screen's runner, sending ``name``'s lengths: what the pre-flight did not
    see (a chat template longer than thought, a context that shrank in a swap)."""

    def runner(request: LoadRequest, record: RunEventSink) -> AsyncGenerator[ProgressEvent, None]:
        return run_load(dataclasses.replace(request, profile=profile(name)), record)

    return runner


async def _drive_load_screen(
    tmp_path: Path, url: str, profile_name: str, runner: Any, until: str
) -> tuple[str, str, list[Any]]:
    """Run ``profile_name`` from the Load screen against ``url`` until its status says
    ``until``: its status, failure lines and the stored runs."""
    store = open_store(tmp_path / "runs.db")
    try:
        app = frozen_app(frozen_services(store=store, load_runner=runner))
        async with app.run_test(size=SIZE) as pilot:
            for frame in fleet_frames("rig-node", 1, range(3), (_engine(url),)):
                app.ingest("rig-node", frame)
            await pilot.press("4")
            screen: Any = app.screen
            await wait_until(pilot, lambda: bool(screen.target_keys), "the healthy engine")
            screen.query_one("#target").value = "rig-node/llama-a"
            screen.query_one("#profile").value = profile_name
            screen.query_one("#load-from").value = "here"  # no agent: its own URL
            await pilot.click("#run")
            await wait_until(
                pilot,
                lambda: until in text_of(pilot, "#load-status"),
                "the load test to end",
                timeout_s=180,
            )
            status, failures = text_of(pilot, "#load-status"), text_of(pilot, "#load-failures")
        store.flush()
        return status, failures, store.list_runs()
    finally:
        store.close()


async def _run_from_tui(tmp_path: Path, url: str, profile: str, runner: Any) -> tuple[str, str]:
    """Run ``profile`` from the Load screen against ``url``; its status and failure lines."""
    status, failures, runs = await _drive_load_screen(
        tmp_path, url, profile, runner, "load test failed"
    )
    (run,) = runs
    assert run.status == "failed", run
    assert run.status_reason and run.status_reason in status.replace("\n", "")
    return status, failures


async def test_the_load_screen_refuses_a_profile_longer_than_llama_servers_context(
    small_ctx_server: str, tmp_path: Path
) -> None:
    """The sweep's 256 + 128 tokens cannot fit llama-server's 256-token context (its
    n_ctx in /props): refused before any request, nothing stored.  Before, the run sent
    its 160 requests, each refused, and was stored as a failed run."""
    status, _, runs = await _drive_load_screen(
        tmp_path, small_ctx_server, "sweep", run_load, "load test not started"
    )
    flat = status.replace("\n", " ")
    assert "up to 256 prompt + 128 output = 384 tokens" in flat, status
    assert "the context of 256 tokens that llama.cpp" in flat, status
    assert "default_generation_settings.n_ctx in /props" in flat, status
    assert runs == []


async def test_context_overflow_shows_llama_servers_message_in_the_tui(
    small_ctx_server: str, tmp_path: Path
) -> None:
    """Where the pre-flight could not see it coming, the engine's own words show."""
    runner = _lengths_of("sweep")  # the smoke profile's 32 + 16 tokens passed the check
    status, failures = await _run_from_tui(tmp_path, small_ctx_server, "smoke", runner)
    assert OVERFLOW in status and "exceeds the available context size" in status, status
    lines = failures.splitlines()
    assert len(lines) == 5, failures  # each of the sweep's levels, with the engine's words
    assert all(f"http_status 32: HTTP 400 {OVERFLOW}: request (" in line for line in lines)
    assert lines[0].startswith("c=1 failed:"), failures


async def test_a_wrong_model_shows_llama_servers_message_in_the_tui(
    router_server: str, tmp_path: Path
) -> None:
    runner = _asking_for("no-such-model")
    status, failures = await _run_from_tui(tmp_path, router_server, "smoke", runner)
    assert NO_MODEL in status, status
    assert failures.splitlines() == [
        f"c=1 failed: http_status 4: HTTP 400 invalid_request_error: {NO_MODEL}",
        f"c=2 failed: http_status 4: HTTP 400 invalid_request_error: {NO_MODEL}",
    ]


async def test_bench_prints_and_stores_llama_servers_reasons(
    small_ctx_server: str, router_server: str, tmp_path: Path
) -> None:
    db = tmp_path / "runs.db"
    common = ("--engine", "llamacpp", "--concurrency", "1,2", "--requests", "4", "--save",
              "--db", str(db))  # fmt: skip
    # lengths that cannot fit the engine's context: refused before any request
    code, _out, err = await bench(
        "--url", small_ctx_server, "--input-len", "256", "--output-len", "128", *common
    )
    assert code == 2, err
    flat = " ".join(err.split())
    assert "up to 256 prompt + 128 output = 384 tokens, more than the context of 256" in flat
    assert "(default_generation_settings.n_ctx in /props)" in flat, err

    # a dataset's prompts, whose lengths the pre-flight cannot know: the engine's words
    dataset = tmp_path / "long.json"
    long_turn = " ".join(["the engine reads every word of this prompt"] * 60)
    dataset.write_text(
        json.dumps([{"conversations": [{"from": "human", "value": long_turn},
                                       {"from": "gpt", "value": "ok"}]}])
    )  # fmt: skip
    code, out, err = await bench(
        "--url", small_ctx_server, "--dataset", str(dataset), "--output-len", "16", *common
    )
    assert code == 1, err
    assert f"failures at c=2: http_status 4: HTTP 400 {OVERFLOW}: request (" in out, out
    said = f"(failed: all 8 requests failed: http_status 8 — HTTP 400 {OVERFLOW}: request ("
    assert said in err.replace("\n", ""), err

    code, out, err = await bench(
        "--url", router_server, "--model", "no-such-model", "--input-len", "16",
        "--output-len", "8", *common,
    )  # fmt: skip
    # bench's pre-flight asks /v1/models first: a model the server does not serve is
    # refused before any request, with the server's list, and nothing is stored
    assert code == 2, err
    assert "does not serve model 'no-such-model'; it serves:" in err, err
    store = open_store(db)
    try:
        (run,) = store.list_runs()  # the dataset's run only
        assert run.status == "failed" and OVERFLOW in (run.status_reason or ""), run
    finally:
        store.close()
