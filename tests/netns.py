"""A multi-host test rig on one machine: each test node is a Linux network namespace.

Every node gets a veth pair whose outer end sits on one Linux bridge in the root namespace
(``198.18.N.1/24`` for slot N = ``INFER_TOP_NETNS_SLOT``, default 0; nodes ``.11``,
``.12``, ... from the benchmarking range 198.18.0.0/15, never anything routable) and runs
its own ``infer-agent`` there (``ip netns exec``), listening on the node's 198.18 address.
A node's loopback is its own: an engine that binds it is unreachable from the control
plane (pytest, in the root namespace), as on a real fleet. The root dockerd sets the
FORWARD policy to DROP and bridged frames pass through it, so node-to-node traffic needs
one ACCEPT rule for the bridge; it is removed at tear-down. Names carry one prefix per
slot, and anything left with it by a killed run is removed before a new rig is built.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

SLOT = int(os.environ.get("INFER_TOP_NETNS_SLOT", "0"))
"""Which rig this run builds (0-99): two runs on one machine at once (a CI run beside an
engineer's) each take their own slot, so their names and subnets never meet."""
if not 0 <= SLOT <= 99:
    raise ValueError(f"INFER_TOP_NETNS_SLOT must be 0..99, not {SLOT}")
PREFIX = "itf16" if SLOT == 0 else f"itf{SLOT}s"
"""Every namespace, link and rule of this rig starts with it (15-character link names)."""
BRIDGE = f"{PREFIX}-br"
SUBNET = f"198.18.{SLOT}"
BRIDGE_ADDRESS = f"{SUBNET}.1"
AGENT_PORT = 7070
FORWARD_RULE = ("FORWARD", "-i", BRIDGE, "-o", BRIDGE, "-j", "ACCEPT")
COMMAND_TIMEOUT_S = 30


def _run(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S, check=check
    )


def netns_reason() -> str | None:
    """Why this machine cannot build the rig (None: it can)."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool in ("ip", "iptables"):
        if shutil.which(tool) is None:
            return f"no {tool} on PATH: run scripts/rig.sh (it installs iproute2 and iptables)"
    probe = _run("ip", "netns", "list", check=False)
    if probe.returncode != 0:
        return f"ip netns does not work here: {probe.stderr.strip()}"
    return None


@dataclass
class TestNode:
    """One node: its namespace, address and agent (a real ``infer-agent`` process)."""

    __test__ = False  # not a test class, whatever its name

    name: str
    namespace: str
    address: str
    token: str
    token_file: Path
    state_dir: Path
    veth: str = ""
    """The root-side end of the node's link: ``ip link set VETH down`` cuts the node off."""
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def agent_url(self) -> str:
        return f"http://{self.address}:{AGENT_PORT}"

    def run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """A command inside the node."""
        return _run("ip", "netns", "exec", self.namespace, *argv, check=check)


def _pids(namespace: str) -> list[int]:
    listing = _run("ip", "netns", "pids", namespace, check=False)
    return [int(p) for p in listing.stdout.split() if p.isdigit()]


def _kill_namespace_processes(namespace: str) -> None:
    """Every process in the node (its agent and the engines the agent started), by pid:
    TERM, then KILL for whatever still runs after a bounded wait."""
    for sig, wait_s in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
        pids = _pids(namespace)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + wait_s
        while _pids(namespace) and time.monotonic() < deadline:
            time.sleep(0.1)
        if not _pids(namespace):
            return


def clean_leftovers() -> None:
    """Remove what a killed run of this rig left: namespaces, links, the FORWARD rule."""
    for line in _run("ip", "netns", "list", check=False).stdout.splitlines():
        namespace = line.split()[0] if line.split() else ""
        if namespace.startswith(f"{PREFIX}-"):
            _kill_namespace_processes(namespace)
            _run("ip", "netns", "del", namespace, check=False)
    for line in _run("ip", "-o", "link", "show", check=False).stdout.splitlines():
        parts = line.split(":")
        link = parts[1].strip().split("@")[0] if len(parts) > 1 else ""
        if link.startswith(f"{PREFIX}-"):
            _run("ip", "link", "del", link, check=False)
    for _ in range(10):  # one rule per killed run at most; bounded all the same
        if _run("iptables", "-D", *FORWARD_RULE, check=False).returncode != 0:
            break


def _wait_healthy(node: TestNode, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    last: object = None
    while time.monotonic() < deadline:
        if node.process is not None and node.process.poll() is not None:
            raise RuntimeError(f"the agent of node {node.name} exited ({node.process.returncode})")
        try:
            with urllib.request.urlopen(f"{node.agent_url}/healthz", timeout=2) as resp:
                if resp.status == 200:
                    return
        except OSError as exc:
            last = exc
        time.sleep(0.2)
    raise TimeoutError(f"the agent of node {node.name} did not answer in {timeout_s:g} s: {last}")


def _agent_argv(node: TestNode, natives: dict[str, Path], model_dirs: Sequence[Path]) -> list[str]:
    argv = [
        sys.executable,
        "-m",
        "agents.cli",
        "--listen",
        f"{node.address}:{AGENT_PORT}",
        "--token-file",
        str(node.token_file),
        "--node-name",
        node.name,
        "--state-dir",
        str(node.state_dir),
        "--platform",
        "linux",
    ]
    for kind, binary in natives.items():
        argv += ["--native", f"{kind}={binary}"]
    for directory in model_dirs:
        argv += ["--model-dir", str(directory)]
    return argv


@contextlib.contextmanager
def network_nodes(
    names: Sequence[str],
    workdir: Path,
    *,
    natives: dict[str, Path],
    model_dirs: Sequence[Path] = (),
) -> Iterator[dict[str, TestNode]]:
    """Nodes named ``names`` on one bridge, each with its agent answering; all of it is
    removed on exit, whatever happened inside."""
    clean_leftovers()
    nodes: dict[str, TestNode] = {}
    logs = []
    try:
        _run("iptables", "-I", *FORWARD_RULE)
        _run("ip", "link", "add", BRIDGE, "type", "bridge")
        _run("ip", "addr", "add", f"{BRIDGE_ADDRESS}/24", "dev", BRIDGE)
        _run("ip", "link", "set", BRIDGE, "up")
        for index, name in enumerate(names):
            namespace, veth = f"{PREFIX}-{name}", f"{PREFIX}-v{index}"
            _run("ip", "netns", "add", namespace)
            _run(
                "ip",
                "link",
                "add",
                veth,
                "type",
                "veth",
                "peer",
                "name",
                "eth0",
                "netns",
                namespace,
            )
            _run("ip", "link", "set", veth, "master", BRIDGE)
            _run("ip", "link", "set", veth, "up")
            token_file = workdir / f"{name}.token"
            token = f"fleet-token-{name}-{os.urandom(12).hex()}"
            token_file.write_text(token + "\n")
            token_file.chmod(0o600)
            node = TestNode(
                name,
                namespace,
                f"{SUBNET}.{11 + index}",
                token,
                token_file,
                workdir / f"{name}-state",
                veth,
            )
            node.run("ip", "addr", "add", f"{node.address}/24", "dev", "eth0")
            node.run("ip", "link", "set", "eth0", "up")
            node.run("ip", "link", "set", "lo", "up")
            log = (workdir / f"{name}-agent.log").open("wb")
            logs.append(log)
            node.process = subprocess.Popen(
                ["ip", "netns", "exec", namespace, *_agent_argv(node, natives, model_dirs)],
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)},
            )
            nodes[name] = node
        for node in nodes.values():
            _wait_healthy(node)
        yield nodes
    finally:
        for node in nodes.values():
            _kill_namespace_processes(node.namespace)
            if node.process is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    node.process.wait(timeout=5)
        for log in logs:
            log.close()
        clean_leftovers()
