"""A telemetry field is declared once (telemetry.frames): the wire, the store's columns and
the migration of an older file follow from that declaration."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

import telemetry
from store import open_store
from store.samples import ENGINE_SAMPLES, GPU_SAMPLES, _table
from telemetry import EngineTelemetry, GpuSample, HostSample, TelemetryFrame, stored

REPO = Path(__file__).parents[2]
_VALUES: dict[type[Any], Any] = {bool: True, int: 7, float: 2.5, str: "seven", bytes: b"\x07"}


def _read(path: Path, sql: str) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(path)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


def _column_types(path: Path, table: str) -> dict[str, str]:
    return {r[1]: r[2] for r in _read(path, f"PRAGMA table_info({table})")}


def _frame(ts: float, **gpu_values: Any) -> TelemetryFrame:
    gpu = GpuSample(index=0, name="NVIDIA H200", **gpu_values)
    return TelemetryFrame(node="h200-1", seq=1, ts=ts, host=HostSample(), gpus=(gpu,))


def test_every_stored_field_is_written_and_read_back(tmp_path: Path) -> None:
    """Whatever telemetry.frames marks stored lands in its column, value for value."""
    gpu = GpuSample(0, "NVIDIA H200")
    gpu = replace(gpu, **{f.name: _VALUES[f.value_type] for f in GPU_SAMPLES.values})
    engine = EngineTelemetry("llama", "llamacpp", "ready", "healthy")
    engine = replace(engine, **{f.name: _VALUES[f.value_type] for f in ENGINE_SAMPLES.values})
    now = time.time()  # recent: older samples outside runs are folded into history
    frame = TelemetryFrame("h200-1", 1, now, HostSample(), gpus=(gpu,), engines=(engine,))
    path = tmp_path / "fleet.db"
    with open_store(path) as st:
        st.add_telemetry([frame])
        st.flush()
    for table, item in ((GPU_SAMPLES, gpu), (ENGINE_SAMPLES, engine)):
        columns = ", ".join(f.column for f in table.fields)
        (row,) = _read(path, f"SELECT {columns} FROM {table.name}")
        expected = [frame.node, frame.ts] + [getattr(item, f.name) for f in table.values]
        assert list(row) == expected, table.name


def test_adding_a_gpu_field_is_one_edit(tmp_path: Path) -> None:
    """The one edit, for real: a copy of the telemetry package with one line added to
    GpuSample, and the unchanged agents and store code run against it on a file the
    current declaration made."""
    path = tmp_path / "fleet.db"
    then = time.time()  # recent: older samples outside runs are folded into history
    with open_store(path) as st:
        st.add_telemetry([_frame(then, power_w=400.0, temp_c=50.0)])
        st.flush()
    before = _read(path, "SELECT * FROM gpu_samples")
    assert "fan_rpm" not in _column_types(path, "gpu_samples")

    edited = tmp_path / "src" / "telemetry"
    shutil.copytree(Path(telemetry.__file__).parent, edited)
    frames_py = edited / "frames.py"
    anchor = "    fan_pct: float | None = None\n"
    source = frames_py.read_text()
    assert source.count(anchor) == 1
    the_edit = "    fan_rpm: float | None = field(default=None, metadata=stored())\n"
    frames_py.write_text(source.replace(anchor, anchor + the_edit))

    script = textwrap.dedent(
        """
        import json, sys, time
        import telemetry
        from agents.protocol import frame_from_dict, frame_to_dict
        from store import open_store
        from telemetry import GpuSample, HostSample, TelemetryFrame

        assert telemetry.__file__.startswith(sys.argv[2]), telemetry.__file__
        gpu = GpuSample(index=0, name="NVIDIA H200", power_w=500.0, fan_rpm=1234.0)
        frame = TelemetryFrame(node="h200-1", seq=2, ts=time.time(), host=HostSample(), gpus=(gpu,))
        wire = json.loads(json.dumps(frame_to_dict(frame)))
        received = frame_from_dict(wire)
        with open_store(sys.argv[1]) as st:
            st.add_telemetry([received])
            st.flush()
        print(json.dumps({"wire": wire["gpus"][0]["fan_rpm"],
                          "received": received.gpus[0].fan_rpm}))
        """
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(edited.parent), str(REPO)])}
    done = subprocess.run(
        [sys.executable, "-c", script, str(path), str(edited)],
        env=env,
        cwd=tmp_path,  # not the checkout: its own telemetry package would come first
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == {"wire": 1234.0, "received": 1234.0}

    # The file the old declaration made gained the column (typed from the annotation)
    # and kept its row; the new frame's value is stored next to it.
    assert _column_types(path, "gpu_samples")["fan_rpm"] == "REAL"
    rows = _read(path, "SELECT power_w, temp_c, fan_rpm FROM gpu_samples ORDER BY ts")
    assert rows == [(400.0, 50.0, None), (500.0, None, 1234.0)]
    width = len(before[0])
    assert _read(path, "SELECT * FROM gpu_samples ORDER BY ts")[0][:width] == before[0]


def test_a_stored_field_the_store_cannot_keep_is_refused_clearly() -> None:
    @dataclass(frozen=True, slots=True)
    class Sample:
        index: int = field(metadata=stored("gpu_index"))
        clocks_mhz: tuple[float, ...] = field(default=(), metadata=stored())

    with pytest.raises(TypeError, match=r"Sample\.clocks_mhz: the store keeps bool, int"):
        _table("gpu_samples", "gpus", Sample)
