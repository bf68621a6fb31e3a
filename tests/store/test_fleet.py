"""Nodes, deployments, events and GPU history as the TUI stores and reads them."""

from __future__ import annotations

import time

from store import Store
from tests.store.conftest import gpu_frame, h200_trace, summary_from_h200


def test_node_upsert_keeps_first_seen_and_updates_the_rest(mem_store: Store) -> None:
    mem_store.upsert_node("h200-1", platform="nvidia", address="10.0.0.7:7777", seen_at=100.0)
    mem_store.upsert_node("h200-1", gpus=["NVIDIA H200"], seen_at=200.0)
    mem_store.upsert_node("orin-1", platform="jetson", unified_memory=True, seen_at=150.0)
    mem_store.flush()
    h200, orin = mem_store.nodes()
    assert (h200.name, h200.platform, h200.address) == ("h200-1", "nvidia", "10.0.0.7:7777")
    assert (h200.gpus, h200.first_seen, h200.last_seen) == (["NVIDIA H200"], 100.0, 200.0)
    assert orin.unified_memory and orin.gpus is None


def test_deployment_lifecycle_and_events(mem_store: Store) -> None:
    dep = mem_store.add_deployment(
        node="h200-1",
        engine_kind="llamacpp",
        image="infer-top/llama-server:0.3.36-r1",
        launch_config={"ctx_size": 4096},
        gpus=[0],
        started_at=10.0,
    )
    for kind, ts in (("start", 10.0), ("healthy", 12.5), ("crash", 30.0)):
        mem_store.add_event("h200-1", kind, dep, f"{kind} llama-server", ts=ts)
    mem_store.add_event("orin-1", "start", ts=11.0)
    mem_store.stop_deployment(dep, at=30.0)
    mem_store.flush()
    (d,) = mem_store.deployments("h200-1")
    assert (d.deployment_id, d.gpus, d.launch_config, d.stopped_at) == (
        dep,
        [0],
        {"ctx_size": 4096},
        30.0,
    )
    assert [e.kind for e in mem_store.events(node="h200-1")] == ["crash", "healthy", "start"]
    assert [e.node for e in mem_store.events(since=11.0)] == ["h200-1", "h200-1", "orin-1"]


def test_energy_counts_only_the_deployments_gpus(mem_store: Store) -> None:
    dep = mem_store.add_deployment(node="h200-1", engine_kind="vllm", gpus=[1])
    run_id = mem_store.create_run(name="gpu1", node="h200-1", deployment_id=dep)
    mem_store.add_level(run_id, summary_from_h200(1))
    trace = h200_trace()
    for gpu, factor in ((0, 1.0), (1, 3.0)):  # GPU 0 serves another engine
        mem_store.add_telemetry(
            gpu_frame("h200-1", t["t"], gpu, power_w=t["power_mw"] / 1000 * factor,
                      energy_j=t["energy_mj"] / 1000 * factor)
            for t in trace
        )  # fmt: skip
    mem_store.flush()
    (row,) = mem_store.compare([run_id]).rows
    lv = summary_from_h200(1)
    inside = [t for t in trace if lv.started_at <= t["t"] <= lv.ended_at]
    assert row.energy_j is not None
    assert abs(row.energy_j - 3 * (inside[-1]["energy_mj"] - inside[0]["energy_mj"]) / 1000) < 1e-6


def test_a_gpu_without_an_energy_counter_uses_mean_power(mem_store: Store) -> None:
    run_id = mem_store.create_run(name="orin", node="orin-1")
    lv = summary_from_h200(0)
    mem_store.add_level(run_id, lv)
    mem_store.add_telemetry(
        gpu_frame("orin-1", lv.started_at + k * 0.25, 0, power_w=12.0) for k in range(6)
    )
    mem_store.flush()
    (row,) = mem_store.compare([run_id]).rows
    assert row.energy_j is not None
    assert abs(row.energy_j - 12.0 * (lv.ended_at - lv.started_at)) < 1e-6


def test_gpu_series_joins_raw_samples_and_folded_history(mem_store: Store) -> None:
    old = (time.time() - 30 * 86400) // 60 * 60
    mem_store.add_telemetry(
        gpu_frame("n", old + k, 0, util_pct=40.0, power_w=100.0) for k in range(60)
    )
    recent = time.time() - 10
    mem_store.add_telemetry([gpu_frame("n", recent, 0, util_pct=90.0, power_w=600.0)])
    mem_store.flush()
    mem_store.prune_telemetry(older_than_s=7 * 86400)
    series = mem_store.gpu_series("n", 0, old - 1, recent + 1)
    assert [(p.util_pct, p.samples) for p in series] == [(40.0, 60), (90.0, 1)]


def test_agent_frames_are_stored(mem_store: Store) -> None:
    from telemetry import EngineTelemetry, GpuSample, HostSample, TelemetryFrame

    frames = [
        TelemetryFrame(
            node="h200-1",
            seq=k,
            ts=t["t"],
            host=HostSample(cpu_pct=12.0),
            gpus=(
                GpuSample(
                    index=0,
                    name="NVIDIA H200",
                    util_pct=float(t["util_gpu"]),
                    mem_used_bytes=int(t["mem_used"]),
                    power_w=t["power_mw"] / 1000,
                    energy_j=t["energy_mj"] / 1000,
                    temp_c=float(t["temp_c"]),
                ),
            ),
            engines=(
                EngineTelemetry(
                    id="llama",
                    kind="llamacpp",
                    state="ready",
                    health="healthy",
                    requests_running=3.0,
                    kv_cache_usage=None,
                ),
            ),
        )
        for k, t in enumerate(h200_trace())
    ]
    for frame in frames:
        mem_store.add_telemetry([frame])
    run_id = mem_store.create_run(name="framed", node="h200-1")
    mem_store.add_level(run_id, summary_from_h200(2))
    mem_store.flush()
    series = mem_store.gpu_series("h200-1", 0, frames[0].ts, frames[-1].ts)
    assert [p.power_w for p in series] == [f.gpus[0].power_w for f in frames]
    (row,) = mem_store.compare([run_id]).rows
    assert row.energy_j is not None and row.energy_j > 0
    engine_rows = mem_store._read(
        lambda c: c.execute(
            "SELECT count(*), max(requests_running), max(kv_cache_usage) FROM engine_samples"
        ).fetchone()
    )
    assert engine_rows == (len(frames), 3.0, None)  # unknown stays NULL, never 0
