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

A node may also be an SSH host (``ssh=`` names them): a real OpenSSH ``sshd`` on its 198.18
address (port 2222, a host key made here), with its agent bound to the node's loopback only,
so the control plane reaches it through ``ssh -L`` and nothing else. The test's own client key,
``known_hosts`` and ``ssh_config`` (one ``Host`` alias per SSH node) come with it (``SshRig``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from tests.netns_docker import NodeDocker, start_dockerd, unmount_under, wait_ready

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
SSHD_PORT = 2222
SSHD = "/usr/sbin/sshd"
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


def sshd_reason() -> str | None:
    """Why this machine cannot run the SSH nodes (None: it can)."""
    if not Path(SSHD).exists() or shutil.which("ssh") is None or shutil.which("ssh-keygen") is None:
        return "no OpenSSH sshd/ssh here: run scripts/rig.sh (it installs openssh-server)"
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
    """The root-side end of the node's link (``link_cut`` takes it down)."""
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    ssh: bool = False
    """An SSH host: sshd on its address, its agent on its own loopback only."""
    docker: NodeDocker | None = None
    """The node's own Docker daemon (``dockerd=True``), its agent's ``DOCKER_HOST``."""

    @property
    def agent_url(self) -> str:
        """The agent's URL as the node itself sees it (for an SSH node: its loopback)."""
        host = "127.0.0.1" if self.ssh else self.address
        return f"http://{host}:{AGENT_PORT}"

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


def _agent_answers(node: TestNode) -> object:
    """True when the node's agent answers /healthz; else why not. An SSH node's agent is
    on the node's own loopback: asked from inside the node."""
    url = f"{node.agent_url}/healthz"
    if node.ssh:
        probe = node.run("python3", "-c", PROBE, url, check=False)
        return probe.returncode == 0 or probe.stderr.strip()[-200:]
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return resp.status == 200 or resp.status
    except OSError as exc:
        return exc


PROBE = "import sys, urllib.request as u; u.urlopen(sys.argv[1], timeout=2)"


def _wait_healthy(node: TestNode, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    last: object = None
    while time.monotonic() < deadline:
        if node.process is not None and node.process.poll() is not None:
            raise RuntimeError(f"the agent of node {node.name} exited ({node.process.returncode})")
        last = _agent_answers(node)
        if last is True:
            return
        time.sleep(0.2)
    raise TimeoutError(f"the agent of node {node.name} did not answer in {timeout_s:g} s: {last}")


def _agent_argv(node: TestNode, natives: dict[str, Path], model_dirs: Sequence[Path]) -> list[str]:
    argv = [
        sys.executable,
        "-m",
        "agents.cli",
        "--listen",
        f"{'127.0.0.1' if node.ssh else node.address}:{AGENT_PORT}",
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


@dataclass(frozen=True)
class SshRig:
    """The test's OpenSSH material under ``workdir/ssh``: a client key, a ``known_hosts``
    with every SSH node's host key, and an ``ssh_config`` with one ``Host`` alias per SSH
    node (its name), strict host key checking on."""

    directory: Path

    @classmethod
    def at(cls, workdir: Path) -> SshRig:
        return cls(workdir / "ssh")

    @property
    def client_key(self) -> Path:
        return self.directory / "client_key"

    @property
    def known_hosts(self) -> Path:
        return self.directory / "known_hosts"

    @property
    def config_file(self) -> Path:
        return self.directory / "ssh_config"

    def host_key(self, node: TestNode) -> Path:
        return self.directory / f"{node.name}_host_key"

    def sshd_log(self, node: TestNode) -> Path:
        return self.directory / f"{node.name}-sshd.log"

    def host_block(self, alias: str, node: TestNode, *extra: str) -> str:
        """An ``ssh_config`` ``Host`` entry for ``node``; ``extra`` lines (``ProxyJump x``,
        another ``UserKnownHostsFile``) come first, so they win over the defaults."""
        lines = [
            f"Host {alias}",
            *(f"  {line}" for line in extra),
            f"  HostName {node.address}",
            f"  Port {SSHD_PORT}",
            "  User root",
            f"  IdentityFile {self.client_key}",
            "  IdentitiesOnly yes",
            f"  UserKnownHostsFile {self.known_hosts}",
            "  GlobalKnownHostsFile /dev/null",
            "  StrictHostKeyChecking yes",
        ]
        return "\n".join(lines) + "\n"


def _start_sshd(node: TestNode, rig: SshRig, log: IO[bytes]) -> subprocess.Popen[bytes]:
    """A real sshd on the node's address, key login only; TCP forwards both ways (OpenSSH's
    default: a distributed run's load node reaches the engine's agent by a remote forward)."""
    host_key = rig.host_key(node)
    _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", node.name, "-f", str(host_key))
    public = host_key.with_suffix(".pub").read_text().split()
    with rig.known_hosts.open("a") as known:
        known.write(f"[{node.address}]:{SSHD_PORT} {public[0]} {public[1]}\n")
    config = rig.directory / f"{node.name}_sshd_config"
    config.write_text(
        f"ListenAddress {node.address}:{SSHD_PORT}\n"
        f"HostKey {host_key}\n"
        f"AuthorizedKeysFile {rig.directory / 'authorized_keys'}\n"
        "PasswordAuthentication no\nKbdInteractiveAuthentication no\n"
        "PermitRootLogin prohibit-password\nStrictModes no\nAllowTcpForwarding yes\n"
        "UsePAM no\n"
        f"PidFile {rig.directory / (node.name + '_sshd.pid')}\n"
    )
    Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege separation directory
    return subprocess.Popen(
        ["ip", "netns", "exec", node.namespace, SSHD, "-D", "-e", "-f", str(config)],
        stdout=log,
        stderr=subprocess.STDOUT,
    )


def _wait_listening(node: TestNode, port: int, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection((node.address, port), 1):
            return
        time.sleep(0.1)
    raise TimeoutError(f"sshd on node {node.name} did not listen in {timeout_s:g} s")


@contextlib.contextmanager
def link_cut(node: TestNode) -> Iterator[None]:
    """``node`` cut off from the bridge (the root side of its link down: what it sends and
    what is sent to it is lost, no connection is refused) for the block; the link is up
    again when the block ends, whatever happened inside."""
    _run("ip", "link", "set", node.veth, "down")
    try:
        yield
    finally:
        _run("ip", "link", "set", node.veth, "up")


@contextlib.contextmanager
def network_nodes(
    names: Sequence[str],
    workdir: Path,
    *,
    natives: dict[str, Path],
    model_dirs: Sequence[Path] = (),
    ssh: Collection[str] = (),
    dockerd: bool = False,
) -> Iterator[dict[str, TestNode]]:
    """Nodes named ``names`` on one bridge, each with its agent answering; those in ``ssh``
    are SSH hosts (``SshRig.at(workdir)`` has their keys and aliases); with ``dockerd``
    each runs its own Docker daemon (tests/netns_docker.py), named after the node. All of
    it is removed on exit, whatever happened inside."""
    clean_leftovers()
    rig = SshRig.at(workdir)
    if ssh:
        rig.directory.mkdir(mode=0o700)
        _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(rig.client_key))
        shutil.copy(rig.client_key.with_suffix(".pub"), rig.directory / "authorized_keys")
    nodes: dict[str, TestNode] = {}
    logs = []
    sshds: list[subprocess.Popen[bytes]] = []
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
                ssh=name in ssh,
            )
            node.run("ip", "addr", "add", f"{node.address}/24", "dev", "eth0")
            node.run("ip", "link", "set", "eth0", "up")
            node.run("ip", "link", "set", "lo", "up")
            if node.ssh:
                logs.append(rig.sshd_log(node).open("wb"))
                sshds.append(_start_sshd(node, rig, logs[-1]))
            env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)}
            if dockerd:  # answering before the agent starts: it follows the daemon's events
                logs.append((workdir / f"{name}-dockerd.log").open("wb"))
                node.docker = start_dockerd(namespace, name, workdir / f"{name}-docker", logs[-1])
                nodes[name] = node  # its daemon is torn down with the node from here on
                wait_ready([node.docker])
                env["DOCKER_HOST"] = node.docker.host
            log = (workdir / f"{name}-agent.log").open("wb")
            logs.append(log)
            node.process = subprocess.Popen(
                ["ip", "netns", "exec", namespace, *_agent_argv(node, natives, model_dirs)],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
            )
            nodes[name] = node
        for node in nodes.values():
            _wait_healthy(node)
            if node.ssh:
                _wait_listening(node, SSHD_PORT)
        if ssh:
            rig.config_file.write_text(
                "".join(rig.host_block(n.name, n) for n in nodes.values() if n.ssh)
            )
        yield nodes
    finally:
        for node in nodes.values():
            _kill_namespace_processes(node.namespace)
            if node.process is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    node.process.wait(timeout=5)
        for process in sshds:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=5)
        for log in logs:
            log.close()
        for node in nodes.values():
            if node.docker is not None:
                unmount_under(node.docker.root)
        clean_leftovers()
