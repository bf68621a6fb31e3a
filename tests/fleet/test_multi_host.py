"""Two hosts, for real: the control plane (this test, in the root namespace) and nodes ``a``
and ``b`` (network namespaces, each with its own ``infer-agent``). llama.cpp runs on ``b``
and binds b's loopback, so the control plane reaches it only through b's agent; a load
test that aimed at its loopback URL would reach nothing."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import replace
from pathlib import Path

import aiohttp
import pytest

from agents.client import AgentClient
from agents.protocol import EngineInfo
from control.config import load_config
from control.loads import LoadProfile, LoadRequest, resolve_target, run_load
from control.model import NodeStatus
from control.nodes import NodeHandle
from control.wiring import build_services
from store import RunRecorder, open_store
from tests.fleet.conftest import write_config
from tests.loadgen.conftest import bench
from tests.netns import SUBNET, TestNode
from tests.tui.conftest import SIZE
from tests.tui.driving import run_smoke_load
from tests.tui.helpers import text_of, wait_until
from tests.waiting import apoll_until
from tui.app import create_app

pytestmark = [pytest.mark.netns, pytest.mark.docker]  # docker: the rig's llama-server and model

SWEEP = LoadProfile("fleet", (1, 2, 4), 4, 16, 8)
CHAT = {
    "model": "tiny",
    "messages": [{"role": "user", "content": "Count to three."}],
    "max_tokens": 8,
    "stream": True,
    "stream_options": {"include_usage": True},
}


def auth(node: TestNode) -> dict[str, str]:
    return {"Authorization": f"Bearer {node.token}"}


def proxy_url(node: TestNode, engine: EngineInfo) -> str:
    return f"{node.agent_url}/v1/engines/{engine.id}/proxy"


async def unreachable(http: aiohttp.ClientSession, url: str) -> bool:
    try:
        async with http.get(url, timeout=aiohttp.ClientTimeout(total=3)):
            return False
    except (aiohttp.ClientError, TimeoutError):
        return True


async def test_the_engine_is_reachable_only_through_its_agents_proxy(
    fleet: dict[str, TestNode], llama_on_b: EngineInfo
) -> None:
    b, engine = fleet["b"], llama_on_b
    assert engine.url is not None and engine.url.startswith("http://127.0.0.1:")
    # It runs: inside node b, its own loopback answers.
    inside = b.run("python3", "-c", f"import urllib.request as u; u.urlopen('{engine.url}/health')")
    assert inside.returncode == 0, inside.stderr
    async with aiohttp.ClientSession() as http:
        # Not at the control plane's loopback, not at node b's address.
        assert await unreachable(http, f"{engine.url}/health")
        assert await unreachable(http, f"http://{b.address}:{engine.port}/health")
        # Through the proxy, with the agent's token (the engine's key is swapped in).
        chat_url = f"{proxy_url(b, engine)}/v1/chat/completions"
        async with http.post(chat_url, json=CHAT, headers=auth(b)) as resp:
            assert resp.status == 200, await resp.text()
            chunks = [
                json.loads(line.removeprefix(b"data: "))
                async for line in resp.content
                if line.startswith(b"data: ") and not line.startswith(b"data: [DONE]")
            ]
        async with http.post(chat_url, json=CHAT) as resp:
            assert resp.status == 401
    contents = [c for c in chunks if c.get("choices") and c["choices"][0]["delta"].get("content")]
    assert contents, chunks
    assert chunks[-1]["usage"]["completion_tokens"] > 0


def stored(db: Path) -> tuple[list[tuple[object, ...]], int, int]:
    with sqlite3.connect(db) as conn:
        runs = conn.execute("SELECT id, node, deployment_id, profile_json FROM runs").fetchall()
        levels = conn.execute("SELECT count(*) FROM levels").fetchone()[0]
        requests = conn.execute("SELECT count(*) FROM requests").fetchone()[0]
    return runs, levels, requests


def assert_one_proxied_sweep(db: Path, engine: EngineInfo) -> None:
    runs, levels, requests = stored(db)
    ((_run_id, node, deployment_id, profile_json),) = runs
    profile = json.loads(profile_json)
    assert (node, deployment_id) == ("b", engine.id)
    assert profile["placement"] == {
        "engine_node": "b",
        "load_node": "control-plane",
        "path": "proxied",
    }
    assert profile["target"]["url"] == f"http://{SUBNET}.12:7070/v1/engines/{engine.id}/proxy/v1"
    assert (levels, requests) == (3, 3 * 4)


async def test_a_sweep_from_the_load_screens_path_goes_through_the_proxy(
    fleet: dict[str, TestNode], llama_on_b: EngineInfo, tmp_path: Path
) -> None:
    b, engine = fleet["b"], llama_on_b
    assert engine.url is not None
    db = tmp_path / "runs.db"
    store = open_store(db)
    try:
        async with AgentClient(b.agent_url, b.token) as client:
            handle = NodeHandle("b", b.agent_url, client, token=b.token)
            request = LoadRequest(
                "b", engine.id, engine.kind, engine.url, engine.id, SWEEP, load_from="here"
            )
            request = await resolve_target(handle, request)
        recorder = RunRecorder(store)
        events = [event async for event in run_load(request, recorder)]
        assert type(events[-1]).__name__ == "RunFinished", events[-1]
        assert recorder.status == "completed", recorder.reason
    finally:
        store.close()
    assert_one_proxied_sweep(db, engine)


async def test_bench_by_node_and_engine_id_goes_through_the_proxy(
    fleet: dict[str, TestNode], llama_on_b: EngineInfo, tmp_path: Path
) -> None:
    config = write_config(tmp_path / "config.toml", fleet)
    db = tmp_path / "runs.db"
    code, _out, err = await bench(
        "--config", str(config), "--node", "b", "--engine-id", llama_on_b.id, "--via-proxy",
        "--concurrency", "1,2,4", "--requests", "4", "--input-len", "16", "--output-len", "8",
        "--save", "--db", str(db), "--jsonl", str(tmp_path / "requests.jsonl"),
    )  # fmt: skip
    assert code == 0, err + (tmp_path / "requests.jsonl").read_text()
    assert_one_proxied_sweep(db, llama_on_b)


async def test_a_client_that_leaves_mid_stream_frees_the_engines_slot(
    fleet: dict[str, TestNode], llama_on_b: EngineInfo
) -> None:
    b, engine = fleet["b"], llama_on_b
    proxy = proxy_url(b, engine)
    # 8000 tokens take this engine over 20 s; a slot free within 8 s was cancelled.
    long = {**CHAT, "max_tokens": 8000, "ignore_eos": True}

    async def busy_slots(http: aiohttp.ClientSession) -> list[dict[str, object]]:
        async with http.get(f"{proxy}/slots", headers=auth(b)) as resp:
            assert resp.status == 200, await resp.text()
            slots: list[dict[str, object]] = await resp.json()
        return [s for s in slots if s.get("is_processing")]

    async with aiohttp.ClientSession() as http:
        resp = await http.post(f"{proxy}/v1/chat/completions", json=long, headers=auth(b))
        assert resp.status == 200
        await resp.content.readline()  # the answer streams
        assert await busy_slots(http), "the request should be generating"
        resp.close()  # the client goes away mid-answer
        await apoll_until(
            lambda: busy_slots(http),
            "the engine's slot free again",
            done=lambda s: not s,
            timeout_s=8.0,
        )


@pytest.mark.parametrize(
    ("load_from", "label", "path"),
    [
        ("node", "load from b, next to its engine (node-local)", "node-local"),
        ("here", "load from control-plane → engine on b, through its agent's proxy", "proxied"),
    ],
)
async def test_the_load_screen_runs_a_sweep_from_where_it_is_told_and_says_so(
    fleet: dict[str, TestNode],
    llama_on_b: EngineInfo,
    tmp_path: Path,
    load_from: str,
    label: str,
    path: str,
) -> None:
    config = load_config(write_config(tmp_path / "config.toml", fleet))
    config = replace(config, db_path=tmp_path / "runs.db")
    async with build_services(config) as services:
        app = create_app(config, services=services)
        async with app.run_test(size=SIZE) as pilot:
            await wait_until(
                pilot, lambda: app.model.nodes["b"].status is NodeStatus.OK, "node b's frames"
            )
            await pilot.press("4")
            key = f"b/{llama_on_b.id}"
            await wait_until(pilot, lambda: key in app.screen.target_keys, "b's engine as target")
            await run_smoke_load(pilot, key, load_from)
            shown = text_of(pilot, "#load-path")
        (run,) = services.store.list_runs()
    assert label in shown
    assert run.profile["placement"]["path"] == path and run.status == "completed"
    assert (run.node, run.deployment_id, run.request_count) == ("b", llama_on_b.id, 8)
