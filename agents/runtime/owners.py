"""Which deployment owns a process that holds GPU memory.

NVML names PIDs only.  A Compose engine's processes carry its container's id in their
cgroup (``/proc/PID/cgroup``), and the container its deployment in the
``org.infer-top.deployment`` label; a process-runtime engine is the process the agent
started or one of its descendants.  Each runtime that can own processes answers for
its own deployments (:class:`~agents.runtime.PidOwner`); this module holds what they
read from ``/proc`` and asks them in turn.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable
from pathlib import Path

import psutil

from agents.runtime import PidOwner

log = logging.getLogger(__name__)

PROC = Path("/proc")
_CONTAINER_ID = re.compile(r"(?<![0-9a-f])[0-9a-f]{64}(?![0-9a-f])")
"""A Docker container id in a cgroup path: ``/docker/<id>`` (cgroupfs driver, v1 or v2)
or ``/system.slice/docker-<id>.scope`` (systemd driver)."""


def container_of(pid: int, proc: Path = PROC) -> str | None:
    """The id of the container process ``pid`` runs in; None outside one (or gone)."""
    try:
        text = (proc / str(pid) / "cgroup").read_text()
    except (OSError, ValueError):  # gone, or not ours to read
        return None
    for line in text.splitlines():
        found = _CONTAINER_ID.findall(line.split(":", 2)[-1])
        if found:  # nested paths name the innermost container last
            return str(found[-1])
    return None


def lineage(pid: int) -> list[int]:
    """``pid`` and its ancestors, nearest first; [] when it is gone."""
    try:
        proc = psutil.Process(pid)
        return [pid, *(p.pid for p in proc.parents())]
    except (psutil.Error, ValueError):
        return []


def pid_owner(runtimes: Iterable[object]) -> Callable[[int], str | None]:
    """The deployment owning a PID, asking every runtime that can own processes."""
    owners = [r for r in runtimes if isinstance(r, PidOwner)]

    def owner(pid: int) -> str | None:
        for runtime in owners:
            try:
                found = runtime.owner_of(pid)
            except Exception:  # attribution must never cost the GPU readings
                log.exception("runtime %s could not attribute PID %d", runtime, pid)
                continue
            if found is not None:
                return found
        return None

    return owner
