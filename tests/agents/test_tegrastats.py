"""tegrastats parsing on the real lines in tests/fixtures/jetson/."""

from __future__ import annotations

from pathlib import Path

import pytest

from agents.collectors.jetson import MIB, parse_tegrastats, reading_to_gpu
from tests.waiting import poll_until


@pytest.fixture
def lines(fixtures_dir: Path) -> list[str]:
    text = (fixtures_dir / "jetson" / "tegrastats-lines.txt").read_text()
    return [line for line in text.splitlines() if line and not line.startswith("#")]


def test_fixture_has_three_lines(lines: list[str]) -> None:
    assert len(lines) == 3


def test_jetpack7_agx_orin_line(lines: list[str]) -> None:
    r = parse_tegrastats(lines[0])
    assert r.ram_used_bytes == 20642 * MIB and r.ram_total_bytes == 62817 * MIB
    assert r.gpu_util_pct == 12 and r.gpu_clock_mhz == 1300
    assert r.emc_util_pct == 3 and r.emc_clock_mhz == 3199
    assert r.gpu_temp_c == pytest.approx(47.625)
    assert r.temps_c["cpu"] == pytest.approx(52.968)
    assert r.rails_w == {"VDD_GPU_SOC": 5.139, "VDD_CPU_CV": 3.268, "VIN_SYS_5V0": 5.5}
    # No VDD_IN on AGX Orin: the rails are parallel branches, so the board draws their sum.
    assert r.power_w == pytest.approx(5.139 + 3.268 + 5.5)
    cpu = [23, 10, 4, 14, 30, 18, 10, 10, 33, 7, 5, 27]
    assert r.cpu_pct == pytest.approx(sum(cpu) / len(cpu))


def test_jetpack6_single_clock_line(lines: list[str]) -> None:
    r = parse_tegrastats(lines[1])
    assert r.ram_used_bytes == 4722 * MIB and r.ram_total_bytes == 7844 * MIB
    assert r.gpu_util_pct == 10 and r.gpu_clock_mhz == 1300
    assert r.power_w is None  # the shortened line has no rails: n/a, not 0
    assert r.cpu_pct is None


def test_thor_line_has_clocks_but_no_load(lines: list[str]) -> None:
    r = parse_tegrastats(lines[2])
    assert r.gpu_util_pct is None
    assert r.gpu_clock_mhz == 1000


def test_board_input_rail_wins_over_the_sum() -> None:
    r = parse_tegrastats(
        "RAM 3000/7620MB GR3D_FREQ 40%@624 VDD_IN 5200mW/5100mW "
        "VDD_CPU_GPU_CV 1900mW/1800mW VDD_SOC 1400mW/1400mW"
    )
    assert r.power_w == pytest.approx(5.2)


def test_frame_fields_for_unified_memory(lines: list[str]) -> None:
    gpu = reading_to_gpu(parse_tegrastats(lines[0]), "Jetson AGX Orin")
    assert gpu.mem_used_bytes == 20642 * MIB
    assert gpu.util_pct == 12
    assert gpu.power_w == pytest.approx(13.907)


def test_garbage_is_refused_clearly() -> None:
    with pytest.raises(ValueError, match="not a tegrastats line"):
        parse_tegrastats("hello world")


def test_collector_reads_a_running_tegrastats(tmp_path: Path, lines: list[str]) -> None:
    """The collector's process handling, with a stand-in for the board's tegrastats
    binary (no Jetson here) that prints the recorded JetPack 7 line."""
    import sys

    from agents.collectors.jetson import TegrastatsCollector

    fake = tmp_path / "tegrastats"
    fake.write_text(
        f"#!{sys.executable}\n"
        "import sys, time\n"
        f"line = {lines[0]!r}\n"
        "assert sys.argv[1:3] == ['--interval', '200'], sys.argv\n"
        "while True:\n"
        "    print(line, flush=True)\n"
        "    time.sleep(0.2)\n"  # the real tool's interval: the behaviour faked
    )
    fake.chmod(0o755)
    collector = TegrastatsCollector(interval_s=0.2, binary=str(fake))
    collector.open()
    try:
        (gpu,) = poll_until(
            lambda: [g for g in collector.sample() if g.util_pct is not None], "a first reading"
        )
        assert gpu.util_pct == 12 and gpu.mem_total_bytes == 62817 * MIB
        assert collector.rails_w()["VDD_GPU_SOC"] == pytest.approx(5.139)
        assert collector.unified_memory
    finally:
        collector.close()
    assert collector._proc is not None and collector._proc.poll() is not None
