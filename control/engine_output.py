"""What ``infer-top engine`` prints: the stable ``--json`` shapes, errors as words with
an exit code, and start / swap progress on stderr (a bar on a terminal, lines in a log).

The ``--json`` fields are part of the command's interface (README, ``--help``): a field
is added, never renamed or dropped, so a nightly job's parser keeps working.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from agents.client import AgentError
from agents.protocol import EngineInfo, ServiceInfo, to_dict
from control.config import ConfigError
from control.engine_ops import EngineFailed
from control.ssh_tunnel import TunnelError

EXIT_OK = 0
EXIT_FAILED = 1
"""The engine failed: a start or swap that did not become healthy (a swap rolled back),
or a stop that could not remove what it was asked to."""
EXIT_USAGE = 2
"""Bad arguments or configuration: an unknown node, an unreadable token file."""
EXIT_UNREACHABLE = 3
"""The node's agent did not answer."""
EXIT_REFUSED = 4
"""The agent refused: its policy (403), no such engine (404), a bad request (400)."""
EXIT_INTERRUPTED = 130

ENGINE_FIELDS = (
    "id",
    "kind",
    "runtime",
    "state",
    "health",
    "url",
    "port",
    "gpu_ids",
    "model",
    "config",
    "simulated",
    "started_at",
    "healthy_at",
    "start_timeout_s",
    "message",
    "last_log_line",
    "exit_code",
    "volumes",
    "image_pull",
)
"""The fields of an engine in ``--json`` output, in this order (README documents them)."""


def engine_json(info: EngineInfo) -> dict[str, object]:
    """An engine as ``--json`` shows it: ENGINE_FIELDS, whatever the agent's version adds."""
    values: dict[str, object] = {
        "id": info.id,
        "kind": info.kind,
        "runtime": info.runtime,
        "state": info.state,
        "health": info.health,
        "url": info.url,
        "port": info.port,
        "gpu_ids": list(info.gpu_ids),
        "model": info.model,
        "config": info.config,
        "simulated": info.simulated,
        "started_at": info.started_at,
        "healthy_at": info.healthy_at,
        "start_timeout_s": info.start_timeout_s,
        "message": info.message,
        "last_log_line": info.last_log_line,
        "exit_code": info.exit_code,
        "volumes": list(info.volumes),
        "image_pull": None if info.image_pull is None else to_dict(info.image_pull),
    }
    return {name: values[name] for name in ENGINE_FIELDS}


def engine_rows(engines: Sequence[EngineInfo]) -> list[tuple[str, ...]]:
    """``engine ls``'s table of a node's engines, its heading first."""
    rows: list[tuple[str, ...]] = [
        ("ID", "KIND", "RUNTIME", "STATE", "HEALTH", "URL", "GPUS", "MODEL")
    ]
    for e in engines:
        gpus = ",".join(str(g) for g in e.gpu_ids) or "-"
        rows.append(
            (e.id, e.kind, e.runtime, e.state, e.health, e.url or "-", gpus, e.model or "-")
        )
    return rows


def service_rows(services: Sequence[ServiceInfo]) -> list[tuple[str, ...]]:
    """``engine ls``'s table of the Swarm services a manager's agent deployed: replicas
    running of those asked for, where they may run and where they do."""
    rows: list[tuple[str, ...]] = [
        ("ID", "KIND", "STATE", "REPLICAS", "PORT", "PLACEMENT", "NODES", "MODEL")
    ]
    for s in services:
        running = "?" if s.running is None else str(s.running)
        nodes = ",".join(s.nodes) or "-"
        port = "-" if s.port is None else str(s.port)
        replicas = f"{running}/{s.replicas}"
        rows.append((s.id, s.kind, s.state, replicas, port, s.placement, nodes, s.model or "-"))
    return rows


def print_table(rows: list[tuple[str, ...]]) -> None:
    """Columns padded to their widest cell; the last one (a model name) as it is."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=False)) + row[-1])


def print_json(data: dict[str, object]) -> None:
    print(json.dumps(data, indent=2, default=str), flush=True)


@dataclass(frozen=True, slots=True)
class CommandFailure:
    """Why a command failed, as the operator and a script see it."""

    code: str
    """config | unreachable | unauthorized | refused_by_policy | not_found | refused |
    start_failed | swap_failed | agent_error | model_absent | pull_failed"""
    message: str
    exit_code: int
    details: dict[str, object] = field(default_factory=dict)
    """start_failed: ``phase``, ``last_log_line`` and the ``engine`` as the agent left it."""


def failure_of(exc: BaseException, node: str, action: str) -> CommandFailure | None:
    """The failure ``exc`` means for ``action`` on ``node``; None for a bug (re-raised)."""
    if isinstance(exc, ConfigError):
        return CommandFailure("config", str(exc), EXIT_USAGE)
    if isinstance(exc, EngineFailed):
        details: dict[str, object] = {"phase": exc.phase}
        text = f"{action} on node {node} failed: {exc}"
        if exc.info is not None:
            details["last_log_line"] = exc.info.last_log_line
            details["engine"] = engine_json(exc.info)
            if exc.info.last_log_line and exc.info.last_log_line not in str(exc):
                text += f"\n  last log line: {exc.info.last_log_line}"
            text += (
                f"\n  it stays listed as {exc.info.state} to inspect: infer-top engine logs "
                f"{exc.info.id}; infer-top engine stop {exc.info.id} removes it"
            )
        return CommandFailure(f"{action}_failed", text, EXIT_FAILED, details)
    if isinstance(exc, AgentError):
        return _agent_failure(exc, node, action)
    if isinstance(exc, TunnelError):
        return CommandFailure("unreachable", f"node {node}: {exc}", EXIT_UNREACHABLE)
    return None


def _agent_failure(exc: AgentError, node: str, action: str) -> CommandFailure:
    status, said = exc.status, exc.message
    if status == 0:
        text = f"node {node}: {said}; is infer-agent running there and the URL in the config right?"
        return CommandFailure("unreachable", text, EXIT_UNREACHABLE)
    if status == 401:
        text = f"node {node}: the agent refused the token (401): check the node's token_file"
        return CommandFailure("unauthorized", text, EXIT_REFUSED)
    if status == 403:
        return CommandFailure(
            "refused_by_policy", f"node {node} refused by policy: {said}", EXIT_REFUSED
        )
    if status == 404:
        return CommandFailure("not_found", f"node {node}: {said}", EXIT_REFUSED)
    if status == 502 and action in ("start", "swap"):  # the agent's own verdict: it failed
        return CommandFailure(f"{action}_failed", f"{action} on node {node}: {said}", EXIT_FAILED)
    if status < 500:
        return CommandFailure("refused", f"node {node} refused ({status}): {said}", EXIT_REFUSED)
    return CommandFailure("agent_error", f"node {node} failed ({status}): {said}", EXIT_FAILED)


def report_failure(
    failure: CommandFailure,
    *,
    node: str | None,
    action: str,
    as_json: bool,
    command: str = "engine",
) -> int:
    """Words on stderr (and the failure as JSON on stdout with ``--json``); the exit code."""
    print(f"infer-top {command} {action}: {failure.message}", file=sys.stderr, flush=True)
    if as_json:
        error = {"code": failure.code, "message": failure.message, **failure.details}
        print_json({"ok": False, "node": node, "action": action, "error": error})
    return failure.exit_code


class ProgressView:
    """Start / swap progress on stderr: a bar and the newest line on a terminal, a
    time-stamped line per change otherwise (a log of a nightly job)."""

    def __init__(self, *, quiet: bool) -> None:
        self.quiet = quiet
        self.console = Console(stderr=True, highlight=False, soft_wrap=True)
        self.began = time.monotonic()
        self._bar: Progress | None = None
        self._task: TaskID | None = None

    def __enter__(self) -> ProgressView:
        if not self.quiet and self.console.is_terminal:
            self._bar = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                TimeElapsedColumn(),
                console=self.console,
                transient=True,
            )
            self._task = self._bar.add_task("", total=1.0)
            self._bar.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.stop()

    def __call__(self, text: str, fraction: float | None) -> None:
        if self.quiet:
            return
        if self._bar is not None and self._task is not None:
            self._bar.update(self._task, description=text, completed=fraction)
            return
        self.console.print(f"[{time.monotonic() - self.began:6.1f}s] {text}", markup=False)
