"""The agent over real HTTP on loopback: auth on every route, telemetry, streams,
metrics, policy refusals and the audit log."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable
from pathlib import Path

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from agents.client import AgentClient, AgentError
from agents.config import AgentConfig
from agents.embedded import embedded_agent
from agents.security import PUBLIC_ROUTES, AuditLog
from agents.server import create_app
from tests.ports import free_port
from tests.waiting import apoll_until

from .conftest import TOKEN


def route_table(config: AgentConfig) -> list[tuple[str, str]]:
    app = create_app(config)
    routes = []
    for route in app.router.routes():
        if route.method == "HEAD":
            continue
        info = route.resource.get_info() if route.resource else {}
        path = info.get("path") or info.get("formatter")
        assert path, route
        routes.append((route.method, re.sub(r"\{[^}]+\}", "someid", path)))
    return routes


async def test_every_route_but_liveness_needs_the_token(
    make_config: Callable[..., AgentConfig],
) -> None:
    config = make_config()
    routes = route_table(config)
    assert len(routes) >= 12  # the walk must really see the table
    async with embedded_agent(config) as (url, _), aiohttp.ClientSession() as http:
        for method, path in routes:
            for headers in (
                {},
                {"Authorization": "Bearer wrong-token-wrong-token"},
                {"Authorization": TOKEN},
            ):
                async with http.request(method, url + path, headers=headers) as resp:
                    if path in PUBLIC_ROUTES:
                        assert resp.status == 200, path
                    else:
                        assert resp.status == 401, (method, path, headers)
                        assert resp.headers["WWW-Authenticate"].startswith("Bearer")
        async with http.get(url + "/healthz") as resp:
            assert await resp.json() == {"ok": True}  # tells nothing about the node


async def test_client_reports_wrong_token_in_the_agents_words(agent: tuple) -> None:
    url, _ = agent
    async with AgentClient(url, "not-the-token-at-all") as bad:
        with pytest.raises(AgentError) as info:
            await bad.snapshot()
        assert info.value.status == 401 and "token" in info.value.message
        with pytest.raises(AgentError) as info:
            async for _ in bad.stream(reconnect=False):
                pass
        assert info.value.status == 401


async def test_node_info_and_snapshot_from_the_replayed_h200(agent: tuple) -> None:
    _, client = agent
    node = await client.node_info()
    assert node.platform == "replay" and node.simulated
    assert node.gpus[0].name == "NVIDIA H200" and node.gpus[0].power_limit_w == 700.0
    assert "sim" in node.runtimes
    frame = await client.snapshot()
    assert frame.node == "testnode" and frame.simulated
    gpu = frame.gpus[0]
    assert gpu.mem_total_bytes == 150754820096
    assert gpu.power_w is not None and 50 < gpu.power_w < 750
    assert frame.host.ram_total_bytes and frame.host.ram_total_bytes > 0


async def test_stream_is_sequenced_and_resumes_after_the_last_seq(agent: tuple) -> None:
    _, client = agent
    seen = []
    async for frame in client.stream():
        seen.append(frame.seq)
        if len(seen) == 3:
            break
    assert seen == sorted(seen) and len(set(seen)) == 3

    async def missed_three() -> bool:  # frames the client missed while away
        return (await client.snapshot()).seq >= seen[-1] + 3

    await apoll_until(missed_three, "three frames sent while the client was away")
    resumed = []
    async for frame in client.stream(since_seq=seen[-1]):
        resumed.append(frame.seq)
        if len(resumed) == 3:
            break
    assert resumed == [seen[-1] + 1, seen[-1] + 2, seen[-1] + 3]  # no gap, no repeat


async def test_metrics_expose_the_frame_values(agent: tuple) -> None:
    _, client = agent
    text = await client.metrics_text()
    frame = await client.snapshot()
    values = {
        (sample.name, sample.labels.get("gpu")): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }
    gpu = frame.gpus[0]
    assert values[("infer_gpu_memory_total_bytes", "0")] == gpu.mem_total_bytes
    assert values[("infer_gpu_power_watts", "0")] > 50
    assert ("infer_gpu_energy_joules_total", "0") in values
    # The H200 reports no fan: the series is absent rather than a made-up 0.
    assert not any(name.startswith("infer_gpu_fan") for name, _ in values)


SWAP_TOOK = re.compile(
    r"swapped from (\w+) to (\w+) in ([\d.]+) s \(stopped in ([\d.]+) s, healthy ([\d.]+) s later\)"
)


def swap_times(message: str | None) -> tuple[str, str, float, float, float]:
    """(from kind, to kind, total, stop, start-to-healthy) of a swap's message."""
    found = SWAP_TOOK.search(message or "")
    assert found, message
    return found[1], found[2], float(found[3]), float(found[4]), float(found[5])


async def test_a_swap_says_how_long_the_node_served_nothing(agent: tuple) -> None:
    _, client = agent
    engine = await client.start("sim", {"profile": "h100-llama2-7b-vllm"})
    began = time.monotonic()
    swapped = await client.swap(engine.id, {"profile": "h100-llama2-7b-sglang"})
    wall_s = time.monotonic() - began
    old, new, took_s, down_s, up_s = swap_times(swapped.message)
    assert (old, new) == ("vllm", "sglang")  # the kinds the simulator imitates
    # The message rounds to a tenth: a 0.07 s swap reads "0.1 s" while the client, a few ms
    # of HTTP around it, saw 0.08 s, so its own wall time bounds the swap within a rounding;
    # the rounded parts (each off by 0.05 s at most) sum to within a tenth of the whole.
    assert 0 <= down_s <= took_s <= wall_s + 0.05 and abs(down_s + up_s - took_s) <= 0.11
    # The event log (the TUI's events pane) says the same.
    event = (await client.recent_events())[-1]
    assert event.kind == "swapped" and swapped.message in event.message
    assert (await client.engine(engine.id)).message == swapped.message


@pytest.mark.parametrize(
    ("kind", "config", "options", "words"),
    [
        (
            "llamacpp",
            {"model": "/models/tiny.gguf", "image": "evil/miner:latest"},
            {},
            "image 'evil/miner:latest' is not allow-listed",
        ),
        ("llamacpp", {"model": "/models/tiny.gguf"}, {"privileged": True}, "privileged"),
        (
            "llamacpp",
            {"model": "/models/tiny.gguf"},
            {"volumes": ["/etc:/models:ro"]},
            "outside the model directories",
        ),
        (
            "llamacpp",
            {"model": "/models/tiny.gguf"},
            {"volumes": ["/var/run/docker.sock:/var/run/docker.sock"]},
            "Docker socket",
        ),
        ("llamacpp", {"model": "/models/tiny.gguf"}, {"pid": "host"}, "pid: 'host' is refused"),
        ("llamacpp", {"model": "/models/tiny.gguf"}, {"cap_add": ["SYS_ADMIN"]}, "cap_add"),
        (
            "llamacpp",
            {"model": "/models/tiny.gguf"},
            {"network_mode": "host"},
            "network_mode: 'host' is refused",
        ),
        (
            "llamacpp",
            {"model": "/models/tiny.gguf"},
            {"model_dir": "/root/.ssh"},
            "'/root/.ssh' is outside the model directories",
        ),
        (
            "llamacpp",
            {"model": "/models/tiny.gguf"},
            {"model_dir": "/srv/models/../../etc"},
            "outside the model directories",
        ),
        ("vllm", {"model": "m"}, {}, "not allow-listed"),
    ],
)
async def test_start_requests_outside_the_policy_are_refused(
    make_config: Callable[..., AgentConfig], kind: str, config: dict, options: dict, words: str
) -> None:
    cfg = make_config(
        model_dirs=(Path("/srv/models"),),
        allowed_engines=frozenset({"llamacpp", "sim"}),
        allowed_images=frozenset({"infer-top/llama-server:0.3.36-r1"}),
    )
    async with embedded_agent(cfg) as (url, token), AgentClient(url, token) as client:
        with pytest.raises(AgentError) as info:
            await client.start(kind, config, options=options)
        assert info.value.status == 403
        assert words in info.value.message
        assert await client.engines() == []
    entries = [e for e in AuditLog(cfg.audit_log).entries() if e["action"] == "start"]
    assert entries and entries[-1]["outcome"] == "refused"
    assert words in entries[-1]["reason"]
    assert TOKEN not in cfg.audit_log.read_text()


async def test_bad_requests_get_clear_errors(agent: tuple) -> None:
    url, client = agent
    with pytest.raises(AgentError) as info:
        await client.stop("nope")
    assert info.value.status == 404 and "no engine 'nope'" in info.value.message
    with pytest.raises(AgentError) as info:
        await client.start("nosuch", {"model": "m"})
    assert info.value.status in (400, 403)
    async with aiohttp.ClientSession() as http:
        async with http.post(
            url + "/v1/engines", data=b"{not json", headers={"Authorization": f"Bearer {TOKEN}"}
        ) as resp:
            assert resp.status == 400 and "not JSON" in (await resp.json())["error"]


async def test_stream_reconnects_across_an_agent_restart(
    make_config: Callable[..., AgentConfig],
) -> None:
    """The client follows a restarted agent on the same address without being told:
    the new run's frames (seq from 1 again, new boot_id) are delivered, none twice."""
    from aiohttp import web

    port = free_port()

    async def serve() -> web.AppRunner:
        runner = web.AppRunner(create_app(make_config()), shutdown_timeout=2.0)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        return runner

    runner = await serve()
    frames = []
    async with AgentClient(f"http://127.0.0.1:{port}", TOKEN) as client:
        stream = client.stream(retry_s=0.2)
        for _ in range(3):
            frames.append(await anext(stream))
        await runner.cleanup()  # the agent goes away mid-stream ...
        runner = await serve()  # ... and comes back
        try:
            while frames[-1].boot_id == frames[0].boot_id:
                frames.append(await asyncio.wait_for(anext(stream), timeout=10))
            frames.append(await asyncio.wait_for(anext(stream), timeout=10))
        finally:
            await stream.aclose()
            await runner.cleanup()
    first_run = [f.seq for f in frames if f.boot_id == frames[0].boot_id]
    second_run = [f.seq for f in frames if f.boot_id != frames[0].boot_id]
    assert first_run == sorted(set(first_run))
    assert second_run and second_run == sorted(set(second_run))
    assert second_run[0] <= 3  # the new run's early frames were not skipped as "old"


async def test_a_node_without_accelerator_reports_host_only(
    make_config: Callable[..., AgentConfig],
) -> None:
    async with (
        embedded_agent(make_config(platform="linux")) as (url, token),
        AgentClient(url, token) as client,
    ):
        node = await client.node_info()
        frame = await client.snapshot()
    assert node.platform == "linux" and node.gpus == () and not node.simulated
    assert frame.gpus == () and frame.host.cpu_pct is not None
