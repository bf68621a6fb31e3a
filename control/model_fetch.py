"""Fetching a model onto a node from the operator's side: following an agent's pull on
a progress bar (``infer-top models pull``), and the check before an engine start that
the model is on the node, so a missing one is pulled with progress (or the start
refused, saying so) rather than downloaded silently inside the engine's container."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys

from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from agents.client import AgentClient
from agents.protocol import ModelPull
from engines.catalog import get_spec
from engines.hub_files import parse_ref
from engines.model_files import size_text

CANCEL_TIMEOUT_S = 15.0


async def follow(client: AgentClient, pull: ModelPull, *, quiet: bool) -> ModelPull:
    """The pull's progress on a bar (stderr) until its final state, which it returns;
    cancelled (Ctrl-C), it cancels the pull on the node too."""
    last = pull
    try:
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
            async for last in client.follow_pull(pull.id):
                _show(bar, task, last)
    except asyncio.CancelledError:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(client.cancel_pull(pull.id), CANCEL_TIMEOUT_S)
        print(f"pull {pull.id} of {pull.model} cancelled on node {pull.node}", file=sys.stderr)
        raise
    return last


def _show(bar: Progress, task: TaskID, pull: ModelPull) -> None:
    """The agent's own figures: its bytes on the node and its rate."""
    note = pull.message if pull.source == "ollama" and not pull.final else ""
    rate = "" if pull.rate_bytes_per_s is None else f"{size_text(int(pull.rate_bytes_per_s))}/s"
    bar.update(task, total=pull.total_bytes, completed=pull.done_bytes, rate=rate, note=note)


def hub_token(variable: str = "HF_TOKEN") -> str | None:
    return os.environ.get(variable) or None


async def missing_model(client: AgentClient, kind: str, model: object) -> str | None:
    """Why a start of ``kind`` with ``model`` would download it inside the engine: a
    Hugging Face repo id that the node's caches do not hold; None where the model is
    there or the engine does not fetch repositories (a path, Ollama's own pull)."""
    if not isinstance(model, str) or model.startswith((".", "/", "~")):
        return None
    try:
        spec = get_spec(kind)
        repo, _ = parse_ref(model)
    except (KeyError, ValueError):
        return None
    if spec.weights_format != "safetensors" or spec.model_show_path is not None:
        return None
    found = await client.models()
    if any(m.source == "hf-cache" and m.name == repo for m in found.models):
        return None
    return f"model {repo} is not on node {found.node}"


async def pull_for_start(client: AgentClient, kind: str, model: str, *, quiet: bool) -> ModelPull:
    """Pull ``model`` for ``kind`` with the progress bar, before the engine starts."""
    repo, revision = parse_ref(model)
    pull = await client.pull_model(repo, revision=revision, engine=kind, hub_token=hub_token())
    return await follow(client, pull, quiet=quiet)
