"""The agent's /metrics for labs that run Prometheus and Grafana (issue 21, point 6): the
engines' TTFT / ITL as histograms equal to the engine's own, per-process GPU memory with
its engine, the agent's scrape durations and errors; still clean for ``promtool check
metrics``; and every metric the shipped Grafana dashboard queries is one it exports.  The
Prometheus scrape example passes ``promtool check config``."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families

from agents.client import AgentClient
from agents.collectors.engines import EngineScraper
from agents.config import AgentConfig
from agents.embedded import embedded_agent
from agents.metrics import make_registry
from agents.runtime import Deployment
from engines.catalog.registry import get_spec
from telemetry import HostSample, TelemetryFrame
from tests.conftest import IN_CI
from tests.ports import free_port
from tests.waiting import apoll_until

from .conftest import GIB, write_processes

ROOT = Path(__file__).parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "infer-top.json"
SCRAPE_EXAMPLE = ROOT / "deploy" / "prometheus" / "prometheus.yml"
METRIC = re.compile(r"\b(infer_[a-z0-9_]+)")


def _promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        if IN_CI:
            pytest.fail("CI=true and promtool is missing: run scripts/rig.sh", pytrace=False)
        pytest.skip("promtool is not installed (scripts/rig.sh installs it)")
    return found


def _queries(node: object) -> list[str]:
    """Every PromQL text in the dashboard: panel targets and template variable queries."""
    found: list[str] = []
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("expr", "definition") and isinstance(value, str):
                found.append(value)
            elif key == "query" and isinstance(value, str) and "(" in value:
                found.append(value)
            else:
                found += _queries(value)
    elif isinstance(node, list):
        for item in node:
            found += _queries(item)
    return found


def _samples(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


async def _chat(url: str) -> None:
    """One streamed request to the simulated engine, so its histograms count something."""
    async with aiohttp.ClientSession() as http:
        async with http.get(url + "/v1/models") as resp:
            model = (await resp.json())["data"][0]["id"]
        body = {"model": model, "messages": [{"role": "user", "content": "hi"}],
                "max_tokens": 8, "stream": True}  # fmt: skip
        async with http.post(url + "/v1/chat/completions", json=body) as resp:
            assert resp.status == 200
            await resp.read()


async def test_metrics_carry_what_the_dashboard_queries_and_promtool_passes_them(
    make_config: Callable[..., AgentConfig], processes: Path, bystander: int
) -> None:
    promtool = _promtool()
    dashboard = json.loads(DASHBOARD.read_text())
    queried = {m for q in _queries(dashboard) for m in METRIC.findall(q)}
    assert len(queried) >= 15  # the walk must really see the panels
    # GPU memory by engine needs a GPU process: the replay lists one of the test's own
    write_processes(processes, {bystander: 3 * GIB})
    async with (
        embedded_agent(make_config(replay_processes=processes)) as (url, token),
        AgentClient(url, token) as client,
    ):
        engine = await client.start("sim", {"profile": "h100-llama2-7b-vllm"})
        assert engine.url is not None and engine.url.startswith("http://127.0.0.1:")
        await _chat(engine.url)

        async def not_yet() -> tuple[list[str], str]:
            """The queried metrics not exported yet (the token rates need two scrapes)."""
            text = await client.metrics_text()
            samples = _samples(text)
            missing = sorted(queried - set(samples))
            if not any(v >= 1 for _, v in samples.get("infer_engine_ttft_seconds_count", [])):
                missing.append("(the request in infer_engine_ttft_seconds)")
            return missing, text

        _, text = await apoll_until(
            not_yet,
            "every metric the dashboard queries on /metrics",
            done=lambda found: not found[0],
            timeout_s=15,
        )
        async with aiohttp.ClientSession() as http, http.get(engine.url + "/metrics") as resp:
            own = _samples(await resp.text())

    samples = _samples(text)
    labels = {"node": "testnode", "engine": engine.id, "kind": "vllm"}
    # the engine's own histogram, bucket for bucket
    for ours, theirs in (("infer_engine_ttft_seconds", "vllm:time_to_first_token_seconds"),):
        assert samples[f"{ours}_count"] == [(labels, own[f"{theirs}_count"][0][1])]
        assert samples[f"{ours}_sum"] == [(labels, own[f"{theirs}_sum"][0][1])]
        bucket = {float(lb.pop("le")): (lb, v) for lb, v in samples[f"{ours}_bucket"]}
        assert bucket == {float(lb["le"]): (labels, v) for lb, v in own[f"{theirs}_bucket"]}
    assert "infer_engine_itl_seconds_count" in samples
    # the agent's scrapes of that engine: timed, none failed
    (took,) = samples["infer_agent_engine_scrape_duration_seconds_count"]
    assert took[0] == labels and took[1] >= 1
    assert samples["infer_agent_engine_scrape_errors_total"] == [(labels, 0.0)]

    assert queried <= set(samples)  # every metric the dashboard queries (awaited above)

    check = await asyncio.to_thread(
        subprocess.run, [promtool, "check", "metrics"], input=text, capture_output=True,
        text=True, timeout=30,
    )  # fmt: skip
    assert (check.returncode, check.stdout + check.stderr) == (0, "")


async def test_a_failing_scrape_is_counted_as_an_error() -> None:
    """A ready engine whose metrics page answers 500: one error per scrape, and the
    duration still observed."""

    async def broken(_: web.Request) -> web.Response:
        return web.Response(status=500, text="boom")

    app = web.Application()
    app.router.add_get("/metrics", broken)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        async with aiohttp.ClientSession() as session:
            scraper = EngineScraper(session, timeout_s=2.0)
            dep = Deployment(id="e1", kind="vllm", runtime="process", config={}, port=port,
                             state="ready")  # fmt: skip
            for _ in range(3):
                scrape = await scraper.sample(dep, get_spec("vllm"))
                assert scrape.error == "GET /metrics answered HTTP 500"
            frame = TelemetryFrame(node="n1", seq=0, ts=0.0, host=HostSample())
            registry = make_registry(lambda: frame, scraper.stats)
            samples = {
                s.name: (s.labels, s.value)
                for family in registry.collect()
                for s in family.samples
                if s.name.startswith("infer_agent_")
            }
            labels = {"node": "n1", "engine": "e1", "kind": "vllm"}
            assert samples["infer_agent_engine_scrape_errors_total"] == (labels, 3.0)
            assert samples["infer_agent_engine_scrape_duration_seconds_count"] == (labels, 3.0)
            scraper.forget("e1")  # a stopped engine's series go with it
            assert not any(
                s.name.startswith("infer_agent_") for f in registry.collect() for s in f.samples
            )
    finally:
        await runner.cleanup()


def test_the_prometheus_scrape_example_is_valid(tmp_path: Path) -> None:
    """``promtool check config`` reads the token and CA files it names: the example's
    paths are pointed at stand-ins, everything else as shipped."""
    promtool = _promtool()
    (tmp_path / "infer-agent.token").write_text("token\n")
    (tmp_path / "lab-ca.pem").write_text("stand-in\n")
    text = SCRAPE_EXAMPLE.read_text()
    assert "type: Bearer" in text and "insecure_skip_verify" not in text.split("never ", 1)[0]
    config = tmp_path / "prometheus.yml"
    config.write_text(text.replace("/etc/prometheus/", f"{tmp_path}/"))
    check = subprocess.run([promtool, "check", "config", str(config)], capture_output=True,
                           text=True, timeout=30)  # fmt: skip
    assert check.returncode == 0, check.stdout + check.stderr
