"""The rig fails loudly: a clear message and a non-zero exit, never a silent skip."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RIG = ROOT / "scripts" / "rig.sh"

pytestmark = pytest.mark.docker  # needs the docker CLI and daemon the rig set up


def run_rig(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, "INFER_TOP_RIG_CACHE": str(tmp_path / "cache"), **env}
    return subprocess.run(
        ["bash", str(RIG), "--python", sys.executable],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=300,
    )


def test_rig_reports_a_daemon_that_does_not_start(tmp_path: Path) -> None:
    # A daemon socket nobody serves and a "dockerd" that exits at once: what a
    # machine that may not run containers looks like to the rig.
    result = run_rig(
        tmp_path,
        DOCKER_HOST=f"unix://{tmp_path}/no-such-docker.sock",
        INFER_TOP_DOCKERD="false",
        INFER_TOP_DOCKERD_WAIT_S="2",
    )
    assert result.returncode != 0
    assert "ERROR: the Docker daemon did not come up within 2 s" in result.stderr
    assert "Start it yourself" in result.stderr


def test_rig_reports_an_engine_it_cannot_build(tmp_path: Path) -> None:
    result = run_rig(tmp_path, LLAMA_CPP_PYTHON_VERSION="0.0.999")
    assert result.returncode != 0
    assert "could not download llama-cpp-python==0.0.999" in result.stderr
    assert not (tmp_path / "cache" / "rig.env").exists(), "a failed rig must not claim readiness"
