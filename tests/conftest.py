"""Test-wide fixtures and the hardware markers.

* ``docker``: needs a Docker daemon and the rig (``scripts/rig.sh``).  Skipped
  with a reason on a developer machine without them, but with ``CI=true`` a
  missing rig FAILS the test: CI must prove the real-container paths ran.
* ``netns``: builds test nodes as network namespaces (``tests/netns.py``): root, ``ip``
  and ``iptables``; like ``docker``, a test that cannot run FAILS with ``CI=true``.
* ``gpu``: needs NVML and an NVIDIA GPU; ``jetson``: needs a Jetson board.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"
IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}


@dataclass(frozen=True)
class Rig:
    """What ``scripts/rig.sh`` built: see its ``rig.env``."""

    llama_server_bin: Path
    tiny_model: Path
    llama_image: str
    vllm_image: str
    """vLLM's CPU build serving the tiny Hugging Face model at /models/tiny."""
    compose: tuple[str, ...]


def rig_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(os.environ.get("INFER_TOP_RIG_CACHE", Path(base) / "infer-top-rig"))


@cache
def _rig_or_reason() -> Rig | str:
    env_file = rig_cache_dir() / "rig.env"
    if not env_file.exists():
        return f"the rig is not set up ({env_file} missing): run scripts/rig.sh"
    values = dict(line.split("=", 1) for line in env_file.read_text().splitlines() if "=" in line)
    if shutil.which("docker") is None:
        return "no docker CLI on PATH: run scripts/rig.sh"
    probe = subprocess.run(["docker", "info"], capture_output=True, text=True, timeout=30)
    if probe.returncode != 0:
        return "no Docker daemon answers: run scripts/rig.sh (it starts dockerd)"
    images = [values.get(key, "") for key in ("INFER_TOP_LLAMA_IMAGE", "INFER_TOP_VLLM_IMAGE")]
    for image in images:
        if not image:
            return f"{env_file} names no image of this rig (an older rig): run scripts/rig.sh"
        inspect = subprocess.run(["docker", "image", "inspect", image], capture_output=True)
        if inspect.returncode != 0:
            return f"image {image} missing: run scripts/rig.sh"
    return Rig(
        llama_server_bin=Path(values["INFER_TOP_LLAMA_SERVER_BIN"]),
        tiny_model=Path(values["INFER_TOP_TINY_MODEL"]),
        llama_image=images[0],
        vllm_image=images[1],
        compose=tuple(values["INFER_TOP_COMPOSE"].split()),
    )


@cache
def _nvml_reason() -> str | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        count = pynvml.nvmlDeviceGetCount()
        pynvml.nvmlShutdown()
    except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
        return f"no NVIDIA GPU here (NVML: {exc})"
    return None if count > 0 else "NVML found no GPU"


def _jetson_reason() -> str | None:
    if Path("/etc/nv_tegra_release").exists() or shutil.which("tegrastats"):
        return None
    return "not a Jetson board (no /etc/nv_tegra_release, no tegrastats)"


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("docker"):
        rig = _rig_or_reason()
        if isinstance(rig, str):
            if IN_CI:
                pytest.fail(f"CI=true and a docker test cannot run: {rig}", pytrace=False)
            pytest.skip(rig)
    if item.get_closest_marker("netns"):
        from tests.netns import netns_reason

        if reason := netns_reason():
            if IN_CI:
                pytest.fail(f"CI=true and a netns test cannot run: {reason}", pytrace=False)
            pytest.skip(reason)
    if item.get_closest_marker("gpu") and (reason := _nvml_reason()):
        pytest.skip(reason)
    if item.get_closest_marker("jetson") and (reason := _jetson_reason()):
        pytest.skip(reason)


@pytest.fixture(scope="session")
def rig() -> Rig:
    value = _rig_or_reason()
    if isinstance(value, str):
        if IN_CI:
            pytest.fail(f"CI=true and the rig is missing: {value}", pytrace=False)
        pytest.skip(value)
    return value


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    return FIXTURES


@pytest.fixture
def compose_project(rig: Rig) -> Iterator[str]:
    """A unique Compose project name, torn down (volumes too) after the test."""
    import uuid

    name = f"itest-{uuid.uuid4().hex[:8]}"
    yield name
    subprocess.run(
        [*rig.compose, "-p", name, "down", "-v", "--remove-orphans", "-t", "2"],
        capture_output=True,
        timeout=120,
    )
