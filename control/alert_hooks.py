"""The lab's own tools on an alert: per severity, a command (the alert's JSON on its
stdin) or a webhook (the JSON as a POST body), each time-limited.  They run on a small
thread pool, never on the TUI's event loop, so a hook that hangs costs its timeout on
its own thread and nothing else; a failure is logged, never raised."""

from __future__ import annotations

import json
import logging
import subprocess
import urllib.request
from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor

from alerts import Alert, HookConfig, Severity

log = logging.getLogger(__name__)

MAX_WORKERS = 4
"""Hooks in flight at once; more wait their turn (each ends within its timeout)."""


def hook_payload(alert: Alert, event: str) -> bytes:
    """What a hook receives: the alert and whether it was raised or cleared."""
    return json.dumps({"event": event, "alert": alert.to_json()}, sort_keys=True).encode()


def run_hook(hook: HookConfig, body: bytes) -> None:
    """Run one hook to its end or its timeout; raises why it failed."""
    if hook.command:
        done = subprocess.run(
            hook.command, input=body, capture_output=True, timeout=hook.timeout_s, check=False
        )
        if done.returncode != 0:
            err = done.stderr.decode(errors="replace").strip()[-300:]
            raise RuntimeError(f"{hook.command[0]} exited with code {done.returncode}: {err}")
    if hook.webhook:
        request = urllib.request.Request(
            hook.webhook,
            data=body,
            headers={"Content-Type": "application/json", "User-Agent": "infer-top alerts"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=hook.timeout_s) as resp:
            resp.read(64 * 1024)


class HookRunner:
    def __init__(self, hooks: Mapping[Severity, HookConfig]) -> None:
        self.hooks = dict(hooks)
        self._pool: ThreadPoolExecutor | None = None

    def fire(self, alert: Alert, event: str) -> Future[None] | None:
        """Start the hook of ``alert``'s severity, if one is configured; never blocks."""
        hook = self.hooks.get(alert.severity)
        if hook is None:
            return None
        if self._pool is None:
            self._pool = ThreadPoolExecutor(MAX_WORKERS, thread_name_prefix="infer-top-hook")
        future = self._pool.submit(run_hook, hook, hook_payload(alert, event))
        future.add_done_callback(lambda f: _log_failure(f, alert, hook))
        return future

    def close(self) -> None:
        """Stop taking hooks; those running end within their own timeouts."""
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)


def _log_failure(future: Future[None], alert: Alert, hook: HookConfig) -> None:
    if future.cancelled():
        return
    exc = future.exception()
    if exc is not None:
        target = hook.webhook or " ".join(hook.command)
        log.warning("alert hook %s for %s (%s) failed: %s", target, alert.title, alert.id, exc)
