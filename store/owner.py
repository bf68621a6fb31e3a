"""Which process a run belongs to, so a run whose process died (SIGKILL, the
OOM killer, a power cut) is marked ``interrupted`` the next time the store
opens instead of showing ``running`` forever.

A pid alone would not do: pids are reused.  A run records its host name, its
pid and its process's start identity: the kernel's boot id, the pid namespace
and the start time in clock ticks since boot (field 22 of ``/proc/PID/stat``),
which together name one process for the life of the host.  Only Linux exposes
them; elsewhere no identity is recorded and such runs are never judged (left
``running`` rather than guessed).  A run of another host is never judged
either: a store file may be shared.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from functools import cache
from pathlib import Path


@dataclass(frozen=True, slots=True)
class Owner:
    host: str
    pid: int
    start: str | None
    """``boot id/pid namespace/start ticks``; None where the OS does not tell."""


@cache
def _boot_and_namespace() -> str | None:
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        namespace = os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return None
    return f"{boot}/{namespace}"


def start_identity(pid: int) -> str | None:
    """The start identity of process ``pid`` as seen from this pid namespace;
    None when there is no such process (or no /proc)."""
    prefix = _boot_and_namespace()
    if prefix is None:
        return None
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    # "pid (comm) state ppid ...": comm may hold spaces and parentheses, so the
    # fields are counted after its last ")"; field 22 (starttime) is the 20th.
    ticks = stat[stat.rindex(b")") + 2 :].split()[19].decode()
    return f"{prefix}/{ticks}"


def this_process() -> Owner:
    pid = os.getpid()
    return Owner(socket.gethostname(), pid, start_identity(pid))


def is_gone(host: str | None, pid: int | None, start: str | None) -> bool:
    """True only when the recorded process surely no longer runs."""
    prefix = _boot_and_namespace()
    if host != socket.gethostname() or pid is None or start is None or prefix is None:
        return False
    parts = start.split("/")
    if len(parts) != 3:  # not written by this code: do not guess
        return False
    boot, namespace, _ticks = parts
    my_boot, my_namespace = prefix.split("/")
    if boot != my_boot:
        return True  # the host has rebooted since: every process of that boot is gone
    if namespace != my_namespace:
        return False  # another pid namespace (a container): its pids are not ours to read
    return start_identity(pid) != start
