"""A node's agent through the system ``ssh`` client: a local port forward, watched and redialled.

No SSH is spoken here: OpenSSH does it, with the operator's own ``~/.ssh/config`` (aliases,
``ProxyJump``, keys, agent) or the ``-F`` file the node names. ``BatchMode=yes`` means ssh
never prompts (a prompt inside the TUI would hang it): a host it cannot authenticate is an
error with ssh's own words, shown per node. ``ExitOnForwardFailure=yes`` makes a forward that
cannot be set up end ssh instead of leaving a tunnel to nowhere, and ``ServerAliveInterval``
ends it when the far side went silent; either way the tunnel dials again with back-off on
the same local port, so the node's URL never changes while infer-top runs.

A tunnel may also carry a remote forward back (``reverse_to``): a port on the node's loopback
that reaches an address this machine reaches (a distributed run's other agent), the port
OpenSSH allocates on the first dial and asks for again on every later one.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import socket
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from control.backoff import Backoff

TunnelPhase = Literal["connecting", "up", "retrying", "failed"]
ALIVE_INTERVAL_S = 5
ALIVE_COUNT = 3
"""ssh gives up after this many unanswered keep-alives (15 s of silence)."""
CONNECT_TIMEOUT_S = 10
PROBE_EVERY_S = 0.05
STDERR_LINES = 20
FOREVER_MARKERS = (
    "Host key verification failed",
    "Permission denied",
    "Bad configuration option",
    "bad configuration options",
    "Can't open user config file",
    "no argument after keyword",
)
"""ssh's words for a refusal that dialling again cannot change: the tunnel stops (failed)."""
ALLOCATED = re.compile(r"Allocated port (\d+) for remote forward")
"""ssh's report of the port the node gave a remote forward asked for as port 0."""


class TunnelError(ConnectionError):
    """The tunnel did not come up (the message is ssh's own reason, in context)."""


@dataclass(frozen=True, slots=True)
class TunnelState:
    phase: TunnelPhase
    detail: str = ""
    """ssh's own last error line (or what went wrong in words)."""
    retry_in_s: float | None = None

    def describe(self, destination: str) -> str:
        """One line for the operator: ``ssh lab-node: retrying in 2 s (ssh: ...)``."""
        head = f"ssh {destination}: {self.phase}"
        if self.phase == "retrying" and self.retry_in_s is not None:
            head += f" in {self.retry_in_s:.0f} s"
        return f"{head} ({self.detail})" if self.detail else head


def free_port() -> int:
    """A TCP port on 127.0.0.1 nothing listens on now (the kernel's pick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def ssh_argv(
    destination: str,
    *,
    config_file: Path | None = None,
    ssh: str = "ssh",
    flags: Sequence[str] = (),
    options: Sequence[str] = (),
    command: str | None = None,
) -> list[str]:
    """The one ssh command line infer-top runs: the node's ``-F`` file, ``BatchMode=yes``
    (never a prompt), a bounded connect, ``flags`` and ``-o options``, the destination
    after ``--`` (never read as an option), then the remote ``command`` (one shell string)."""
    config = ["-F", str(config_file)] if config_file else []
    extra = [arg for option in options for arg in ("-o", option)]
    return [
        ssh,
        *config,
        *flags,
        *extra,
        "-o",
        "BatchMode=yes",
        "-o",
        f"ConnectTimeout={CONNECT_TIMEOUT_S}",
        "--",
        destination,
        *([command] if command is not None else []),
    ]


def explain(destination: str, lines: list[str]) -> str:
    """ssh's last words, with what to do where ssh's own line does not say it."""
    last = lines[-1] if lines else "ssh exited without a word"
    text = "\n".join(lines)
    if "REMOTE HOST IDENTIFICATION HAS CHANGED" in text or "has changed and you have" in text:
        offending = next((ln for ln in lines if ln.startswith("Offending")), "")
        where = f" ({offending})" if offending else ""
        return (
            f"the host key of {destination} has CHANGED{where}; OpenSSH refused it: {last} "
            f"If the machine was reinstalled on purpose, check its new key and remove the "
            f"old one with ssh-keygen -R; otherwise someone may be in between"
        )
    if "host key is known" in text or "No matching host key" in text:
        return (
            f"{last} ssh does not know {destination}'s host key yet: connect once with "
            f"`ssh {destination}` to check and accept it"
        )
    if "Permission denied" in text:
        return f"{last} (the key is refused: is it loaded or named by IdentityFile?)"
    if "remote port forwarding failed" in text:
        return (
            f"{last} (the node's sshd must allow remote forwards for a distributed run: "
            f"AllowTcpForwarding yes or remote in its sshd_config)"
        )
    return last


class SshTunnel:
    """``ssh -N -L 127.0.0.1:<local_port>:<remote_host>:<remote_port> DESTINATION``, kept up;
    with ``reverse_to`` (host, port) also ``-R 127.0.0.1:<node_port>:<host>:<port>``.

    ``state`` is the tunnel's phase now; ``subscribe`` hears every change (the TUI shows
    them). ``start`` runs the watcher in the current loop; ``close`` ends it and ssh.
    """

    def __init__(
        self,
        destination: str,
        remote_host: str,
        remote_port: int,
        *,
        config_file: Path | None = None,
        backoff: Backoff | None = None,
        ssh: str = "ssh",
        reverse_to: tuple[str, int] | None = None,
    ) -> None:
        self.destination = destination
        self.local_port = free_port()
        self._remote = (remote_host, remote_port)
        self._forward = f"127.0.0.1:{self.local_port}:{remote_host}:{remote_port}"
        self._reverse_to = reverse_to
        self.node_port: int | None = None
        """With ``reverse_to``: the port on the node's loopback that reaches it (once up)."""
        self._config_file = config_file
        self._backoff = backoff or Backoff()
        self._ssh = ssh
        self.state = TunnelState("connecting")
        self._listeners: list[Callable[[TunnelState], None]] = []
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._process: asyncio.subprocess.Process | None = None

    def sibling(self, reverse_to: tuple[str, int]) -> SshTunnel:
        """A second tunnel to the same node that also carries ``reverse_to`` back to it
        (not started): a distributed run's way back to the engine's agent."""
        host, port = self._remote
        return SshTunnel(
            self.destination,
            host,
            port,
            config_file=self._config_file,
            backoff=self._backoff,
            ssh=self._ssh,
            reverse_to=reverse_to,
        )

    @property
    def pid(self) -> int | None:
        """The running ssh client's pid (None between attempts)."""
        process = self._process
        return process.pid if process is not None and process.returncode is None else None

    def argv(self) -> list[str]:
        flags = ["-N", "-T", "-L", self._forward]
        if self._reverse_to is not None:
            host, port = self._reverse_to
            flags += ["-R", f"127.0.0.1:{self.node_port or 0}:{host}:{port}"]
        return ssh_argv(
            self.destination,
            config_file=self._config_file,
            ssh=self._ssh,
            flags=flags,
            options=(
                "ExitOnForwardFailure=yes",
                f"ServerAliveInterval={ALIVE_INTERVAL_S}",
                f"ServerAliveCountMax={ALIVE_COUNT}",
            ),
        )

    def subscribe(self, listener: Callable[[TunnelState], None]) -> None:
        self._listeners.append(listener)
        listener(self.state)

    def describe(self) -> str:
        return self.state.describe(self.destination)

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._watch(), name=f"ssh {self.destination}")

    async def wait_up(self, timeout_s: float) -> None:
        """Until the forward works; TunnelError with ssh's reason when it failed for good
        or is not up within ``timeout_s``."""
        self.start()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while self.state.phase != "up":
            if self.state.phase == "failed":
                raise TunnelError(self.describe())
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise TunnelError(f"{self.describe()}; not up after {timeout_s:g} s")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), remaining)

    async def close(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def _set(self, state: TunnelState) -> None:
        self.state = state
        self._changed.set()
        self._changed = asyncio.Event()
        for listener in self._listeners:
            listener(state)

    async def _watch(self) -> None:
        failures = 0
        while True:
            self._set(TunnelState("connecting"))
            came_up, lines, code = await self._attempt()
            failures = 1 if came_up else failures + 1
            if not came_up and any(m in line for line in lines for m in FOREVER_MARKERS):
                self._set(TunnelState("failed", explain(self.destination, lines)))
                return
            delay = self._backoff.delay(failures)
            detail = explain(self.destination, lines) if lines else f"ssh exited ({code})"
            self._set(TunnelState("retrying", detail, delay))
            await asyncio.sleep(delay)

    async def _attempt(self) -> tuple[bool, list[str], int | None]:
        """One ssh run: whether its forward came up, its last stderr lines, its exit code."""
        process = self._process = await asyncio.create_subprocess_exec(
            *self.argv(),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,  # a terminal's ^C goes to infer-top, which ends ssh itself
        )
        lines: deque[str] = deque(maxlen=STDERR_LINES)
        reader = asyncio.create_task(self._collect(process, lines))
        came_up = False
        try:
            while process.returncode is None and not came_up:
                came_up = await _listening(self.local_port) and (
                    self._reverse_to is None or self.node_port is not None
                )
                if came_up:
                    self._set(TunnelState("up"))
                else:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(process.wait(), PROBE_EVERY_S)
            await process.wait()
            await reader
        finally:
            reader.cancel()
            if process.returncode is None:
                await _end(process)
        return came_up, list(lines), process.returncode

    async def _collect(self, process: asyncio.subprocess.Process, lines: deque[str]) -> None:
        """ssh's stderr: the remote forward's allocated port, else its last words."""
        assert process.stderr is not None
        async for raw in process.stderr:
            line = raw.decode(errors="replace").strip()
            if allocated := ALLOCATED.search(line):
                self.node_port = int(allocated.group(1))
            elif line and not line.startswith("@@@"):  # the banner around a changed host key
                lines.append(line)


async def _end(process: asyncio.subprocess.Process) -> None:
    """TERM, then KILL when ssh is still there after a bounded wait."""
    with contextlib.suppress(ProcessLookupError):
        process.terminate()
    try:
        await asyncio.wait_for(process.wait(), 5)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        await process.wait()


async def _listening(port: int) -> bool:
    """Something accepts on 127.0.0.1:port (ssh's forward, once it is set up)."""
    try:
        _reader, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        return False
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return True
