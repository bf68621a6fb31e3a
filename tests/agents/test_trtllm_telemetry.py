"""TensorRT-LLM telemetry through the agent: its iteration stats (JSON ``/metrics``) and
its Prometheus page (``/prometheus/metrics``, only where perf metrics are on) are read
together, whichever of them carries KV use, running and waiting, from a stand-in
engine serving the recorded pages on 127.0.0.1; a bare run that could not get the
options file switching them on is refused."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from agents.catalog_adapter import get_spec
from agents.collectors.engines import EngineScraper
from agents.runtime import Deployment, RuntimeError_
from agents.runtime.process import command_for

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "engines"


def recorded_pages() -> dict[str, str]:
    """``"json: docs-v1.0"`` and so on: the sections of the samples file."""
    pages: dict[str, list[str]] = {}
    current: list[str] = []
    for line in (FIX / "trtllm_pages_samples.txt").read_text().splitlines():
        if line.startswith("=== "):
            current = pages.setdefault(line[4:], [])
        elif pages:  # the provenance header comes before the first section
            current.append(line)
    return {name: "\n".join(lines) + "\n" for name, lines in pages.items()}


PAGES = recorded_pages()


@dataclass
class StandIn:
    url: str
    served: dict[str, str | None] = field(default_factory=dict)
    """Path -> body; None answers 404, as trtllm-serve without perf metrics does."""


@pytest.fixture
async def trtllm() -> AsyncIterator[StandIn]:
    stand_in = StandIn(url="")

    async def serve(request: web.Request) -> web.Response:
        body = stand_in.served.get(request.path)
        if body is None:
            return web.json_response({"detail": "Not Found"}, status=404)
        kind = "application/json" if request.path == "/metrics" else "text/plain"
        return web.Response(text=body, content_type=kind)

    app = web.Application()
    app.router.add_get("/metrics", serve)
    app.router.add_get("/prometheus/metrics", serve)
    runner = web.AppRunner(app)
    await runner.setup()
    try:
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        stand_in.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
        yield stand_in
    finally:
        await runner.cleanup()


def deployment(url: str) -> Deployment:
    return Deployment(
        id="trt1",
        kind="trtllm",
        runtime="compose",
        config={"model": "m"},
        port=int(url.rsplit(":", 1)[1]),
        state="ready",
        health="healthy",
        engine_version="1.0.0",
    )


CASES = {
    # 1.0: iteration stats only; the Prometheus page is not mounted
    "prometheus 404": ("json: collector-unit-test", None, (0.6, 5.0, 3.0)),
    # a Prometheus page without the iteration gauges: the JSON carries them
    "json only": ("json: collector-unit-test", "prometheus: unprefixed", (0.6, 5.0, 3.0)),
    # newer releases drain the stats queue themselves: /metrics is always []
    "prometheus only": ("json: drained", "prometheus: prefixed", (0.6, 5.0, 3.0)),
    # both say it: the Prometheus gauges win (the JSON says 3 of 101256 blocks, 1 running)
    "both": ("json: docs-v1.0", "prometheus: prefixed", (0.6, 5.0, 3.0)),
}


@pytest.mark.parametrize("case", sorted(CASES))
async def test_kv_running_and_waiting_arrive_from_either_page(trtllm: StandIn, case: str) -> None:
    json_page, prom_page, (kv, running, waiting) = CASES[case]
    trtllm.served = {
        "/metrics": PAGES[json_page],
        "/prometheus/metrics": None if prom_page is None else PAGES[prom_page],
    }
    dep, spec = deployment(trtllm.url), get_spec("trtllm")
    async with aiohttp.ClientSession() as http:
        scraper = EngineScraper(http)
        telemetry = scraper.telemetry(dep, await scraper.sample(dep, spec))
    assert telemetry.scrape_error is None  # a page trtllm-serve does not mount is no fault
    assert telemetry.kv_cache_usage == pytest.approx(kv)
    assert (telemetry.requests_running, telemetry.requests_waiting) == (running, waiting)


async def test_the_iteration_stats_alone_still_count(trtllm: StandIn) -> None:
    """The documented v1.0 page: KV use from its block counts, one request running."""
    trtllm.served = {"/metrics": PAGES["json: docs-v1.0"]}
    dep, spec = deployment(trtllm.url), get_spec("trtllm")
    async with aiohttp.ClientSession() as http:
        scraper = EngineScraper(http)
        telemetry = scraper.telemetry(dep, await scraper.sample(dep, spec))
    assert telemetry.kv_cache_usage == pytest.approx(3 / 101256)
    assert telemetry.requests_running == 1.0 and telemetry.scrape_error is None


def test_a_bare_run_with_metrics_is_refused_without_its_options_file(tmp_path: Path) -> None:
    binary = tmp_path / "trtllm-serve"
    dep = Deployment(
        id="bare1", kind="trtllm", runtime="process", config={"model": "/m"}, port=18000
    )
    with pytest.raises(RuntimeError_, match=r"options file.*run it under Compose"):
        command_for(binary, dep)
    dep.config["metrics"] = False
    argv, _ = command_for(binary, dep)
    assert argv[:2] == [str(binary), "/m"] and "--extra_llm_api_options" not in argv
