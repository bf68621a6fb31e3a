"""Wire format: frames, node info, engines and events survive JSON both ways."""

from __future__ import annotations

import json

import pytest

from agents.protocol import (
    AgentEvent,
    EngineInfo,
    GpuInfo,
    NodeInfo,
    ProtocolError,
    engine_info_from_dict,
    event_from_dict,
    frame_from_dict,
    frame_to_dict,
    node_info_from_dict,
    to_dict,
)
from telemetry import EngineTelemetry, GpuProcess, GpuSample, HostSample, TelemetryFrame


def frame() -> TelemetryFrame:
    return TelemetryFrame(
        node="n1",
        seq=7,
        ts=1.5,
        host=HostSample(cpu_pct=3.0, ram_used_bytes=10, ram_total_bytes=20),
        gpus=(
            GpuSample(
                index=0,
                name="H200",
                power_w=123.4,
                throttle_reasons=4,
                processes=(GpuProcess(pid=9, name="vllm", mem_used_bytes=5),),
            ),
        ),
        engines=(
            EngineTelemetry(
                id="e1", kind="vllm", state="ready", health="healthy", kv_cache_usage=None
            ),
        ),
        platform="replay",
        simulated=True,
        extra={"rails_w": {"VDD_IN": 5.0}},
    )


def test_frame_round_trips_through_json() -> None:
    original = frame()
    back = frame_from_dict(json.loads(json.dumps(frame_to_dict(original))))
    assert back == original
    assert back.engines[0].kv_cache_usage is None  # n/a stays null, never 0


def test_fields_from_a_newer_agent_are_ignored() -> None:
    data = frame_to_dict(frame())
    data["gpus"][0]["new_field"] = 1
    data["brand_new"] = True
    assert frame_from_dict(data).gpus[0].power_w == 123.4


def test_other_protocol_version_is_refused_with_advice() -> None:
    data = frame_to_dict(frame())
    data["protocol"] = 2
    with pytest.raises(ProtocolError, match="upgrade"):
        frame_from_dict(data)


def test_malformed_frame_is_a_protocol_error() -> None:
    with pytest.raises(ProtocolError):
        frame_from_dict({"node": "n", "seq": 1, "ts": 0, "host": "nope"})
    with pytest.raises(ProtocolError):
        frame_from_dict({"node": "n"})  # seq, ts, host missing


def test_node_engine_event_round_trip() -> None:
    node = NodeInfo(
        node="n",
        host="h",
        platform="nvidia",
        agent_version="1",
        gpus=(GpuInfo(index=0, name="H200", mem_total_bytes=1),),
        runtimes=("compose",),
    )
    assert node_info_from_dict(json.loads(json.dumps(to_dict(node)))) == node
    eng = EngineInfo(
        id="e",
        kind="llamacpp",
        runtime="compose",
        state="ready",
        health="healthy",
        gpu_ids=(0, 1),
        config={"model": "m"},
    )
    assert engine_info_from_dict(json.loads(json.dumps(to_dict(eng)))) == eng
    ev = AgentEvent(seq=1, ts=2.0, kind="crashed", engine_id="e", message="exit 137")
    assert event_from_dict(to_dict(ev)) == ev
