"""Fetching a model onto a node from the operator's side: following an agent's pull
(``infer-top models pull``'s progress bar, the Engines screen's status line), and the
check before an engine start that the model is on the node, so a missing one is pulled
with progress (or the start refused, saying so) rather than downloaded silently inside
the engine's container."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import AsyncIterator, Sequence

from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from agents.protocol import EngineInfo, ModelInventory, ModelPull
from control.engine_ops import Progress as EngineProgress
from control.engine_ops import start_engine
from control.nodes import AgentLike, LaunchFields
from engines.catalog import get_spec
from engines.hub_files import parse_ref
from engines.model_files import size_text

CANCEL_TIMEOUT_S = 15.0


class PullFailed(RuntimeError):
    """A model's pull that ended failed or cancelled; the agent's words."""


def hub_token(variable: str = "HF_TOKEN") -> str | None:
    return os.environ.get(variable) or None


async def pull_steps(client: AgentLike, pull: ModelPull) -> AsyncIterator[ModelPull]:
    """The pull as the agent reports it, to its final state; a follower that is
    cancelled (Ctrl-C, a screen left) cancels the pull on the node too."""
    try:
        async for step in client.follow_pull(pull.id):
            yield step
    except asyncio.CancelledError:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(client.cancel_pull(pull.id), CANCEL_TIMEOUT_S)
        raise


async def follow(client: AgentLike, pull: ModelPull, *, quiet: bool) -> ModelPull:
    """The pull's progress on a bar (stderr) until its final state, which it returns."""
    last = pull
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TextColumn("{task.fields[rate]}"),
        TimeElapsedColumn(),
        TextColumn("{task.fields[note]}"),
        disable=quiet,
        console=Console(stderr=True),  # stdout stays the result's (--json)
    ) as bar:
        task = bar.add_task(pull.model, total=pull.total_bytes, rate="", note=pull.message)
        try:
            async for last in pull_steps(client, pull):
                _show(bar, task, last)
        except asyncio.CancelledError:
            print(f"pull {pull.id} of {pull.model} cancelled on node {pull.node}", file=sys.stderr)
            raise
    return last


def _show(bar: Progress, task: TaskID, pull: ModelPull) -> None:
    """The agent's own figures: its bytes on the node and its rate."""
    note = pull.message if pull.source == "ollama" and not pull.final else ""
    bar.update(task, total=pull.total_bytes, completed=pull.done_bytes, rate=_rate(pull), note=note)


def _rate(pull: ModelPull) -> str:
    return "" if pull.rate_bytes_per_s is None else f"{size_text(int(pull.rate_bytes_per_s))}/s"


def pull_words(pull: ModelPull) -> tuple[str, float | None]:
    """A pull's progress as the Engines screen's status line and bar show it."""
    if pull.final or not pull.total_bytes:
        return f"pull of {pull.model}: {pull.message or pull.state}", None
    done = f"{size_text(pull.done_bytes)} of {size_text(pull.total_bytes)}"
    rate = f", {_rate(pull)}" if pull.rate_bytes_per_s is not None else ""
    return f"pulling {pull.model}: {done}{rate}", pull.done_bytes / pull.total_bytes


def fetched_repo(kind: str, model: object) -> str | None:
    """The Hugging Face repo a start of ``kind`` with ``model`` has the engine fetch
    from the hub when the node lacks it; None for a path, a simulator, or an engine that
    pulls by name with its own progress (Ollama) or loads GGUF files by path."""
    if not isinstance(model, str) or model.startswith((".", "/", "~")):
        return None
    try:
        spec = get_spec(kind)
        repo, _ = parse_ref(model)
    except (KeyError, ValueError):
        return None
    if spec.weights_format != "safetensors" or spec.model_show_path is not None:
        return None
    return repo


def absent_text(kind: str, model: object, found: ModelInventory) -> str | None:
    """Why the start would download ``model`` inside the engine; None where it need not."""
    repo = fetched_repo(kind, model)
    if repo is None or any(m.source == "hf-cache" and m.name == repo for m in found.models):
        return None
    return f"model {repo} is not on node {found.node}"


async def missing_model(client: AgentLike, kind: str, model: object) -> str | None:
    """``absent_text`` with the node's inventory asked now (only where it matters)."""
    if fetched_repo(kind, model) is None:
        return None
    return absent_text(kind, model, await client.models())


async def _pull_for(client: AgentLike, kind: str, model: str) -> ModelPull:
    repo, revision = parse_ref(model)
    return await client.pull_model(repo, revision=revision, engine=kind, hub_token=hub_token())


async def pull_for_start(client: AgentLike, kind: str, model: str, *, quiet: bool) -> ModelPull:
    """``infer-top engine start --pull``: the model onto the node, on the progress bar."""
    return await follow(client, await _pull_for(client, kind, model), quiet=quiet)


async def pull_then_start(
    client: AgentLike,
    kind: str,
    config: LaunchFields,
    gpus: Sequence[int],
    progress: EngineProgress,
    *,
    runtime: str | None = None,
) -> EngineInfo:
    """The Engines screen's "pull and start": the model onto the node with its progress
    in words, then ``start_engine``; PullFailed where the pull did not end done."""
    last = pull = await _pull_for(client, kind, str(config["model"]))
    async for last in pull_steps(client, pull):
        progress(*pull_words(last))
    if last.state != "done":
        raise PullFailed(last.message)
    return await start_engine(client, kind, config, gpus, progress, runtime=runtime)
