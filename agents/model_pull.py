"""An engine that serves models by name (Ollama) is ready only once it has the model it
was started for: the start gate asks it (``model_show_path``) and pulls a missing model
(``model_pull_path``) first, the pull's progress in the deployment's message, so the
CLI and the TUI show "pulling model llama3.2: pulling 6a0746a1ec1a: 25% of 2.0 GB"
rather than a ready engine whose every request fails."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator

import aiohttp

from agents.catalog_adapter import get_spec
from agents.runtime import Deployment
from engines.model_pull import PullProgress, parse_pull_line

SHOW_TIMEOUT_S = 10.0
PULL_STALL_S = 300.0
"""A pull that streams no line for this long is stuck (a large layer still reports its
bytes every few hundred milliseconds)."""
ERROR_CHARS = 300


async def model_ready(dep: Deployment, session: aiohttp.ClientSession) -> bool:
    """True once the engine has ``dep``'s model (pulled here when it had not); False,
    with the reason in ``dep.message``, when it cannot get it."""
    spec = get_spec(dep.kind)
    show, pull = spec.model_show_path, spec.model_pull_path
    if dep.simulated or show is None or pull is None:
        return True
    model = str(dep.config.get("model") or "")
    try:
        status, text = await _show(session, f"{dep.url}{show}", model)
        if status == 404:
            began = time.monotonic()
            if not await _pull(dep, session, f"{dep.url}{pull}", model):
                return False
            status, text = await _show(session, f"{dep.url}{show}", model)
            if status == 200:
                dep.message = f"pulled model {model} in {time.monotonic() - began:.0f} s"
                return True
            text = f"after the pull said success: {text}"
    except (TimeoutError, aiohttp.ClientError) as exc:
        dep.message = f"could not ask the engine for model {model}: {type(exc).__name__}: {exc}"
        return False
    if status == 200:
        return True
    dep.message = f"the engine does not have model {model}: {show} answered HTTP {status} {text}"
    return False


async def _show(session: aiohttp.ClientSession, url: str, model: str) -> tuple[int, str]:
    timeout = aiohttp.ClientTimeout(total=SHOW_TIMEOUT_S)
    async with session.post(url, json={"model": model}, timeout=timeout) as resp:
        body = await resp.read() if resp.status != 200 else b""
        return resp.status, _error_text(body)


class PullFailed(Exception):
    """An engine's pull that did not end in success; the reason in words."""


async def pull_progress(
    session: aiohttp.ClientSession, url: str, model: str
) -> AsyncIterator[PullProgress]:
    """The engine's pull of ``model`` at ``url``, each progress line as it comes, to the
    final success; PullFailed with the reason otherwise."""
    last: PullProgress | None = None
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=SHOW_TIMEOUT_S, sock_read=PULL_STALL_S)
    try:
        async with session.post(url, json={"model": model}, timeout=timeout) as resp:
            if resp.status != 200:
                raise PullFailed(f"HTTP {resp.status} {_error_text(await resp.read())}")
            async for line in resp.content:
                if not line.strip():
                    continue
                last = parse_pull_line(line)
                if last.error is not None:
                    raise PullFailed(last.error[:ERROR_CHARS])
                yield last
    except aiohttp.ServerTimeoutError:
        raise PullFailed(f"stalled: no progress for {PULL_STALL_S:.0f} s") from None
    except aiohttp.ClientError as exc:  # the engine went away mid-pull
        raise PullFailed(f"{type(exc).__name__}: {exc}") from exc
    except ValueError as exc:  # a line that is no progress object
        raise PullFailed(str(exc)) from exc
    if last is None or not last.done:
        ended = "nothing" if last is None else repr(last.status)
        raise PullFailed(f"the stream ended after {ended}, not success")


async def _pull(dep: Deployment, session: aiohttp.ClientSession, url: str, model: str) -> bool:
    """Stream the pull, its newest progress in ``dep.message``; False with the reason."""
    dep.message = f"pulling model {model}"
    try:
        async for progress in pull_progress(session, url, model):
            dep.message = f"pulling model {model}: {progress.text()}"
    except PullFailed as exc:
        dep.message = f"pulling model {model} failed: {exc}"
        return False
    return True


def _error_text(body: bytes) -> str:
    """The ``error`` of an engine's JSON error answer, else the body's start."""
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        data = None
    if isinstance(data, dict) and data.get("error") is not None:
        return str(data["error"])[:ERROR_CHARS]
    return body[:ERROR_CHARS].decode(errors="replace").strip()
