"""A Docker daemon per test node (tests/netns.py), for what needs a node's own Docker: a
Swarm of two nodes.  Recipe and pitfalls: ../shared/reference/netns/README.md.

Each ``dockerd`` runs in its node's network namespace (``nsenter --net``: ``ip netns
exec`` would remount /sys and hide the cgroups) and its own UTS namespace with the node's
name as host name (Swarm names nodes by host name), with its own data root, exec root,
socket and pid file under the test's directory, no bridge and no iptables rules: its
containers use the node's host network, so an engine on the node's loopback is the
node's alone.  The rig's images come from the host daemon (``docker save | docker load``).
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

START_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class NodeDocker:
    """One node's daemon: where it keeps its state and answers."""

    root: Path

    @property
    def socket(self) -> Path:
        return self.root / "d.sock"

    @property
    def host(self) -> str:
        """``DOCKER_HOST`` for the node's agent and for ``docker -H``."""
        return f"unix://{self.socket}"

    def cli(self, *argv: str, check: bool = True, timeout_s: float = 60) -> str:
        done = subprocess.run(
            ["docker", "-H", self.host, *argv], capture_output=True, text=True, timeout=timeout_s
        )
        if check and done.returncode != 0:
            raise RuntimeError(f"docker {' '.join(argv)}: {done.stderr.strip()[-400:]}")
        return done.stdout.strip()


def start_dockerd(namespace: str, hostname: str, root: Path, log: IO[bytes]) -> NodeDocker:
    """Start the node's daemon (it runs until its namespace's processes are killed)."""
    root.mkdir(parents=True)
    docker = NodeDocker(root)
    script = f'hostname "{hostname}" && exec "$@"'
    subprocess.Popen(
        [
            *("nsenter", f"--net=/var/run/netns/{namespace}", "unshare", "--uts"),
            *("sh", "-c", script, "dockerd"),
            *("dockerd", "--data-root", str(root / "data"), "--exec-root", str(root / "exec")),
            *("--pidfile", str(root / "d.pid"), "-H", docker.host),
            *("--bridge", "none", "--iptables=false", "--ip6tables=false"),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    return docker


def wait_ready(dockers: Iterable[NodeDocker]) -> None:
    for docker in dockers:
        deadline = time.monotonic() + START_TIMEOUT_S
        while docker.cli("info", "--format", "{{.ID}}", check=False, timeout_s=10) == "":
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"dockerd at {docker.host} did not answer in {START_TIMEOUT_S:g} s"
                )
            time.sleep(0.2)


def load_image(image: str, dockers: Iterable[NodeDocker]) -> None:
    """The host daemon's image, saved once and loaded into each node's daemon."""
    for docker in dockers:
        save = subprocess.Popen(["docker", "save", image], stdout=subprocess.PIPE)
        try:
            subprocess.run(
                ["docker", "-H", docker.host, "load", "-q"],
                stdin=save.stdout,
                capture_output=True,
                check=True,
                timeout=300,
            )
        finally:
            if save.stdout is not None:
                save.stdout.close()
            save.wait(timeout=60)


def unmount_under(directory: Path) -> None:
    """What a killed daemon left mounted (its netns handle, overlay and shm mounts),
    deepest first, so the directory can be removed."""
    mounts = Path("/proc/self/mounts").read_text().splitlines()
    inside = [m.split()[1] for m in mounts if len(m.split()) > 1]
    prefix = str(directory.resolve())
    for target in sorted((t for t in inside if t.startswith(prefix)), reverse=True):
        subprocess.run(["umount", "-l", target], capture_output=True, timeout=30)
