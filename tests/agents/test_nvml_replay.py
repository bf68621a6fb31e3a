"""The NVML collector on the recorded H200: values must match the recording.

The stand-in is the pynvml-shaped ReplayNvml only; NvmlCollector and its query
wrapper are the code that runs on a real GPU (see the gpu-marked test)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from agents.collectors.nvml import NVML_CLOCKS_EVENT_SW_POWER_CAP, NvmlCollector
from agents.collectors.replay import GpuLoad, ReplayNvml
from agents.config import AgentConfig, bundled_processes, bundled_trace
from agents.replay_load import gpu_loads
from agents.runtime import Deployment
from telemetry import EngineTelemetry, GpuSample, HostSample, TelemetryFrame


class StepClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def trace() -> dict:
    """The recording the installed agent replays (one copy, shipped in the package)."""
    return json.loads(bundled_trace().read_text())


def replay(gpus: int = 1) -> tuple[NvmlCollector, ReplayNvml, StepClock]:
    clock = StepClock()
    fake = ReplayNvml(bundled_trace(), gpus=gpus, clock=clock)
    collector = NvmlCollector(fake, simulated=True)
    return collector, fake, clock


def test_every_recorded_sample_becomes_a_matching_frame(trace: dict) -> None:
    collector, fake, clock = replay()
    infos = collector.open()
    assert infos[0].name == "NVIDIA H200"
    assert infos[0].mem_total_bytes == trace["static"]["memory_info"]["total"]
    assert infos[0].power_limit_w == 700.0
    for i, rec in enumerate(trace["trace"]):
        clock.now = (i + 0.5) * fake.period_s
        (gpu,) = collector.sample()
        assert gpu.power_w == pytest.approx(rec["power_mw"] / 1000)
        assert gpu.mem_used_bytes == rec["mem"]["used"]
        assert gpu.mem_total_bytes == rec["mem"]["total"]
        assert gpu.energy_j == pytest.approx(rec["energy_mj"] / 1000)
        assert gpu.temp_c == rec["temp_c"]
        assert gpu.sm_clock_mhz == rec["sm_mhz"]
        assert gpu.mem_clock_mhz == rec["mem_mhz"]
        assert gpu.util_pct == rec["util"]["gpu"]
        assert gpu.throttle_reasons == rec["throttle"]


def test_power_capped_phase_sets_throttle_bit_4(trace: dict) -> None:
    collector, fake, clock = replay()
    collector.open()
    capped = idle_capped = 0
    matmul = 0
    for i, rec in enumerate(trace["trace"]):
        clock.now = (i + 0.5) * fake.period_s
        (gpu,) = collector.sample()
        assert gpu.throttle_reasons is not None
        bit = bool(gpu.throttle_reasons & NVML_CLOCKS_EVENT_SW_POWER_CAP)
        if rec["phase"] == "matmul_bf16":
            matmul += 1
            capped += bit
        elif rec["phase"] == "idle":
            idle_capped += bit
    assert NVML_CLOCKS_EVENT_SW_POWER_CAP == 0x4
    assert capped > 0.9 * matmul  # the 700 W cap holds through nearly all of the matmul
    assert idle_capped == 0


def test_unsupported_calls_are_disabled_at_start_and_read_as_none() -> None:
    collector, _, _ = replay()
    collector.open()
    # The H200 answers NotSupported for the fan: found once, never asked again.
    assert ("nvmlDeviceGetFanSpeed", 0) in collector.query.disabled
    (gpu,) = collector.sample()
    assert gpu.fan_pct is None
    assert gpu.power_w is not None


def test_pcie_is_read_off_the_hot_path_in_bytes(trace: dict) -> None:
    collector, _, _ = replay()
    collector.open()
    (gpu,) = collector.sample()
    assert gpu.pcie_tx_bytes_s == trace["static"]["pcie_tx_kbs"] * 1024
    assert gpu.pcie_rx_bytes_s == trace["static"]["pcie_rx_kbs"] * 1024


def test_energy_counter_keeps_rising_when_the_replay_loops() -> None:
    collector, fake, clock = replay(gpus=2)
    collector.open()
    last = [0.0, 0.0]
    for step in range(0, 3 * len(fake.trace), 7):
        clock.now = (step + 0.5) * fake.period_s
        for gpu in collector.sample():
            assert gpu.energy_j is not None and gpu.energy_j >= last[gpu.index]
            last[gpu.index] = gpu.energy_j


def test_replayed_gpus_are_distinct_devices() -> None:
    collector, _, _ = replay(gpus=8)
    infos = collector.open()
    assert len({i.uuid for i in infos}) == 8


def test_the_replayed_process_list_is_built_from_nvmls_structure_and_says_so() -> None:
    bundled = json.loads(bundled_processes().read_text())
    assert bundled["about"].startswith("NOT captured")
    assert "nvmlProcessInfo_v3_t" in bundled["about"]
    collector, _, _ = replay(gpus=2)
    collector.open()
    for gpu in collector.sample():  # every replayed GPU plays the one list
        (proc,) = gpu.processes
        entry = bundled["gpus"][0]["compute"][0]
        assert (proc.pid, proc.mem_used_bytes, proc.usage) == (
            entry["pid"],
            entry["usedGpuMemory"],
            "C",
        )
        assert proc.name is None and proc.engine is None  # no such PID; the agent attributes


def test_compute_and_graphics_lists_merge_per_pid_and_unavailable_memory_is_none(
    tmp_path: Path,
) -> None:
    def entry(pid: int, used: int) -> dict[str, int]:
        return {"pid": pid, "usedGpuMemory": used}

    listing = tmp_path / "processes.json"
    listing.write_text(
        json.dumps(
            {
                "gpus": [
                    {
                        "compute": [entry(41, 2**30), entry(42, 2**64 - 1)],
                        "graphics": [entry(41, 2**30), entry(43, 2**20)],
                    }
                ]
            }
        )
    )
    fake = ReplayNvml(bundled_trace(), processes=listing)
    collector = NvmlCollector(fake, simulated=True)
    collector.open()
    (gpu,) = collector.sample()
    found = {p.pid: (p.usage, p.mem_used_bytes) for p in gpu.processes}
    # NVML_VALUE_NOT_AVAILABLE is n/a, never a 16 EiB process; a C+G context counts once.
    assert found == {41: ("C+G", 2**30), 42: ("C", None), 43: ("G", 2**20)}


def test_a_process_list_that_is_not_one_is_refused_in_words(tmp_path: Path) -> None:
    listing = tmp_path / "processes.json"
    listing.write_text(json.dumps({"gpus": [{"compute": [{"usedGpuMemory": 1}]}]}))
    with pytest.raises(ValueError, match="not a replay process list"):
        ReplayNvml(bundled_trace(), processes=listing)


@pytest.mark.gpu
def test_real_gpu_through_the_same_wrapper() -> None:
    collector = NvmlCollector()
    infos = collector.open()
    try:
        assert infos
        samples = collector.sample()
        for gpu, info in zip(samples, infos, strict=True):
            assert gpu.mem_total_bytes and gpu.mem_used_bytes is not None
            assert gpu.mem_used_bytes <= gpu.mem_total_bytes
            assert gpu.power_w is None or 1 < gpu.power_w < 2000
            assert gpu.temp_c is None or 0 < gpu.temp_c < 120
            assert gpu.name == info.name
    finally:
        collector.close()


@pytest.mark.gpu
async def test_real_gpu_agent_streams_frames(make_config: Callable[..., AgentConfig]) -> None:
    """The whole agent on a real NVIDIA node: node info and frames from the devices."""
    from agents.client import AgentClient
    from agents.embedded import embedded_agent

    async with (
        embedded_agent(make_config(platform="nvidia", interval_s=0.5)) as (url, token),
        AgentClient(url, token) as client,
    ):
        node = await client.node_info()
        assert node.platform == "nvidia" and not node.simulated and node.gpus
        assert node.driver_version
        seqs = []
        async for frame in client.stream():
            assert len(frame.gpus) == len(node.gpus) and not frame.simulated
            assert all(g.mem_total_bytes for g in frame.gpus)
            assert all(g.energy_j is None or g.energy_j > 0 for g in frame.gpus)
            seqs.append(frame.seq)
            if len(seqs) == 3:
                break
        assert seqs == sorted(seqs)


def test_under_load_each_gpu_plays_the_part_of_the_recording_that_matches_it() -> None:
    """No engine: the idle phase; an engine holding the GPU: allocated and idle; an engine
    serving: the memory-bound copy (decode), never the power-capped matmul at 690 W."""
    collector, fake, clock = replay(gpus=3)
    loads = [GpuLoad.EMPTY, GpuLoad.HOLDING, GpuLoad.BUSY]
    fake.load = loads.__getitem__
    collector.open()
    seen: dict[GpuLoad, list[GpuSample]] = {load: [] for load in loads}
    for step in range(len(fake.trace)):
        clock.now = (step + 0.5) * fake.period_s
        for gpu in collector.sample():
            seen[loads[gpu.index]].append(gpu)
    gib = 2**30
    for gpu in seen[GpuLoad.EMPTY]:
        assert gpu.util_pct == 0 and gpu.power_w is not None and gpu.power_w < 115
        assert gpu.mem_used_bytes is not None and gpu.mem_used_bytes < gib
    for gpu in seen[GpuLoad.HOLDING]:
        assert gpu.util_pct is not None and gpu.util_pct <= 5
        assert gpu.power_w is not None and gpu.power_w < 130
        assert gpu.mem_used_bytes is not None and gpu.mem_used_bytes > 20 * gib
    for gpu in seen[GpuLoad.BUSY]:
        assert gpu.util_pct is not None and gpu.util_pct >= 90
        assert gpu.power_w is not None and 350 < gpu.power_w < 500


def test_under_load_the_energy_counter_sums_the_power_shown() -> None:
    collector, fake, clock = replay()
    load = [GpuLoad.EMPTY]
    fake.load = lambda index: load[0]
    collector.open()
    (first,) = collector.sample()
    expected_j, last_j = 0.0, first.energy_j
    for i, phase in enumerate([GpuLoad.BUSY, GpuLoad.EMPTY, GpuLoad.HOLDING, GpuLoad.BUSY] * 5):
        load[0] = phase
        clock.now += 1.0
        (gpu,) = collector.sample()
        assert gpu.energy_j is not None and last_j is not None and gpu.energy_j >= last_j, i
        expected_j += gpu.power_w or 0.0  # one second at the power shown
        last_j = gpu.energy_j
    assert last_j - first.energy_j == pytest.approx(expected_j, rel=0.01)


def test_a_gpus_load_is_the_heaviest_of_the_engines_on_it() -> None:
    def dep(id: str, gpus: tuple[int, ...], state: str = "ready") -> Deployment:
        return Deployment(id=id, kind="vllm", runtime="sim", config={}, gpu_ids=gpus, state=state)

    def engine(id: str, running: float | None, waiting: float | None = 0) -> EngineTelemetry:
        return EngineTelemetry(
            id=id,
            kind="vllm",
            state="ready",
            health="healthy",
            requests_running=running,
            requests_waiting=waiting,
        )

    deployments = [
        dep("idle", (0, 1)),
        dep("busy", (1,)),
        dep("queued", (2,)),
        dep("loading", (3,), state="loading"),
        dep("crashed", (4,), state="crashed"),
    ]
    frame = TelemetryFrame(
        node="n",
        seq=1,
        ts=0.0,
        host=HostSample(),
        engines=(engine("idle", 0), engine("busy", 3), engine("queued", 0, waiting=2)),
    )
    assert gpu_loads(deployments, frame) == {
        0: GpuLoad.HOLDING,
        1: GpuLoad.BUSY,
        2: GpuLoad.BUSY,
        3: GpuLoad.HOLDING,  # no frame of it yet: it holds its memory, serves nothing
    }
    assert gpu_loads(deployments, None)[1] is GpuLoad.HOLDING
