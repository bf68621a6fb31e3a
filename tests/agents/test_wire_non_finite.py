"""A value not measured is null on the wire, never the non-standard JSON ``NaN``: an
engine whose histogram has impossible bucket counts, through the real agent (HTTP and
WebSocket), and non-finite values anywhere in a frame, through the protocol's encoder."""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from agents.client import AgentClient
from agents.config import AgentConfig
from agents.embedded import embedded_agent
from agents.protocol import (
    EngineTelemetry,
    GpuSample,
    HostSample,
    TelemetryFrame,
    dumps,
    frame_from_dict,
    frame_to_dict,
)

from .test_engine_faults import STANDIN, engines_killed_afterwards, frame_where

# vLLM 0.11 names; the TTFT histogram's first bucket counts -Inf (quantile: NaN before),
# the ITL histogram's counts are infinite.
NAN_PAGE = """\
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="m"} 1.0
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{le="0.1",model_name="m"} -Inf
vllm:time_to_first_token_seconds_bucket{le="1.0",model_name="m"} 10.0
vllm:time_to_first_token_seconds_bucket{le="+Inf",model_name="m"} 10.0
vllm:time_to_first_token_seconds_count{model_name="m"} 10.0
vllm:time_to_first_token_seconds_sum{model_name="m"} 2.0
# TYPE vllm:inter_token_latency_seconds histogram
vllm:inter_token_latency_seconds_bucket{le="0.01",model_name="m"} +Inf
vllm:inter_token_latency_seconds_bucket{le="+Inf",model_name="m"} +Inf
vllm:inter_token_latency_seconds_count{model_name="m"} 10.0
vllm:inter_token_latency_seconds_sum{model_name="m"} 2.0
"""


def strict(text: str) -> Any:
    """JSON as the standard has it: NaN, Infinity and -Infinity are refused."""

    def refuse(constant: str) -> Any:
        raise ValueError(f"non-standard JSON constant {constant}")

    return json.loads(text, parse_constant=refuse)


@pytest.fixture
def vllm_standin(
    make_config: Callable[..., AgentConfig], tmp_path: Path
) -> Iterator[tuple[AgentConfig, dict[str, Any]]]:
    """An agent whose native vLLM is the stand-in engine serving NAN_PAGE, and its launch."""
    wrapper = tmp_path / "vllm-serve"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{STANDIN}" "$@"\n')
    wrapper.chmod(0o755)
    pages = tmp_path / "engines" / "nan"
    pages.mkdir(parents=True)
    (pages / "metrics").write_text(NAN_PAGE)
    (pages / "model").mkdir()
    config = make_config(
        native_binaries={"vllm": wrapper}, model_dirs=(tmp_path / "engines",), interval_s=0.3
    )
    with engines_killed_afterwards(config.state_dir, str(STANDIN)):
        yield config, {"model": str(pages / "model")}


async def test_an_engines_impossible_histogram_is_null_on_the_wire(
    vllm_standin: tuple[AgentConfig, dict[str, Any]],
) -> None:
    config, launch = vllm_standin
    async with embedded_agent(config) as (url, token), AgentClient(url, token) as client:
        engine = await client.start("vllm", launch, runtime="process")
        assert engine.health == "healthy", engine.message

        def scraped(frame: TelemetryFrame) -> bool:
            return any(e.id == engine.id and e.requests_running == 1 for e in frame.engines)

        decoded = await frame_where(client, scraped, timeout_s=15)
        assert decoded is not None, "the stand-in engine was never scraped"
        headers = {"Authorization": f"Bearer {token}"}
        async with aiohttp.ClientSession(headers=headers) as http:
            async with http.get(f"{url}/v1/telemetry") as resp:
                answered = strict(await resp.text())
            async with http.ws_connect(f"{url}/v1/telemetry/stream") as ws:
                streamed = strict((await ws.receive(timeout=10)).data)
        await client.stop(engine.id)

    for data in (answered, streamed):
        (sample,) = [e for e in data["engines"] if e["id"] == engine.id]
        assert sample["requests_running"] == 1
        assert sample["ttft_p50_s"] is None and sample["itl_p50_s"] is None
    (sample,) = [e for e in decoded.engines if e.id == engine.id]
    assert sample.ttft_p50_s is None and sample.itl_p50_s is None


def test_non_finite_values_anywhere_in_a_frame_encode_as_null() -> None:
    nan, inf = math.nan, math.inf
    engine = EngineTelemetry(
        "e", "vllm", "ready", "healthy", ttft_p50_s=nan, itl_p50_s=-inf, kv_cache_usage=0.25
    )
    frame = TelemetryFrame(
        node="n",
        seq=1,
        ts=1.0,
        host=HostSample(cpu_pct=nan, load1=0.5),
        gpus=(GpuSample(index=0, name="g", power_w=inf, temp_c=41.0),),
        engines=(engine,),
        extra={"rails_w": {"VDD_IN": nan, "VDD_CPU": 3.0}},
    )
    data = strict(dumps(frame_to_dict(frame)))
    back = frame_from_dict(data)
    assert back.host.cpu_pct is None and back.host.load1 == 0.5
    assert back.gpus[0].power_w is None and back.gpus[0].temp_c == 41.0
    got = back.engines[0]
    assert (got.ttft_p50_s, got.itl_p50_s, got.kv_cache_usage) == (None, None, 0.25)
    assert back.extra == {"rails_w": {"VDD_IN": None, "VDD_CPU": 3.0}}


def test_an_older_agents_nan_decodes_as_not_reported() -> None:
    """json.loads takes ``NaN`` by default: what an older agent sent is still None."""
    text = (
        '{"node": "n", "seq": 1, "ts": 1.0, "host": {"cpu_pct": NaN},'
        ' "engines": [{"id": "e", "kind": "vllm", "state": "ready", "health": "healthy",'
        ' "ttft_p50_s": NaN, "itl_p50_s": Infinity}]}'
    )
    frame = frame_from_dict(json.loads(text))
    assert frame.host.cpu_pct is None
    assert (frame.engines[0].ttft_p50_s, frame.engines[0].itl_p50_s) == (None, None)
