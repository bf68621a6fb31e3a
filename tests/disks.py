"""A small real disk for tests that fill one: a tmpfs mounted under the test's directory."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import IN_CI


def mount(*argv: str) -> None:
    subprocess.run(["mount", *argv], check=True, capture_output=True, timeout=30)


@contextlib.contextmanager
def small_disk(path: Path, size: str) -> Iterator[Path]:
    """A ``size`` tmpfs at ``path`` (mode 0700), unmounted afterwards; mounting needs root,
    which CI and the rig have: there a missing root fails instead of skipping."""
    if os.geteuid() != 0:
        reason = "mounting a tmpfs needs root (CI and the rig run as root)"
        if IN_CI:
            pytest.fail(f"CI=true and a small-disk test cannot run: {reason}", pytrace=False)
        pytest.skip(reason)
    path.mkdir()
    mount("-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(path))
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True, timeout=30)
