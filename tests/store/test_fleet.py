"""Telemetry as the TUI stores it, and the energy comparisons compute from it."""

from __future__ import annotations

from store import Store
from tests.store.conftest import gpu_frame, h200_trace, summary_from_h200


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
    power = mem_store._read(
        lambda c: c.execute("SELECT power_w FROM gpu_samples ORDER BY ts").fetchall()
    )
    assert [p for (p,) in power] == [f.gpus[0].power_w for f in frames]
    (row,) = mem_store.compare([run_id]).rows
    assert row.energy_j is not None and row.energy_j > 0
    engine_rows = mem_store._read(
        lambda c: c.execute(
            "SELECT count(*), max(requests_running), max(kv_cache_usage) FROM engine_samples"
        ).fetchone()
    )
    assert engine_rows == (len(frames), 3.0, None)  # unknown stays NULL, never 0
