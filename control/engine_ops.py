"""Engine control as the Engines screen drives it, free of Textual.

Start / swap ask the agent, then follow the deployment until it is healthy or
has failed, reporting progress in words; the agent's own errors are passed on
as they are (``AgentError(status, message)``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from agents.protocol import EngineInfo, KvCapacity, ServiceInfo
from control.nodes import AgentLike, LaunchFields, NodeHandle
from engines.catalog import kinds
from engines.fit import GIB, KNOWN_MODELS, FileShape, FitEstimate, estimate_fit

Progress = Callable[[str, float | None], None]

FAILED_STATES = frozenset({"crashed", "failed", "stopped"})
PHASES = ("starting", "loading", "ready")


class EngineFailed(RuntimeError):
    """The engine did not become healthy; the message says what the agent saw, ``phase``
    the last start phase seen before it failed (starting: bringing it up, image pulls
    included; loading: waiting for its health route) and ``info`` the agent's last record."""

    def __init__(self, message: str, *, phase: str, info: EngineInfo | None = None) -> None:
        super().__init__(message)
        self.phase = phase
        self.info = info


def engine_choices() -> tuple[str, ...]:
    """The engine kinds a start may name: the catalog's, then a simulated engine."""
    return (*kinds(), "sim")


@dataclass(frozen=True, slots=True)
class FitView:
    text: str
    fits: bool | None
    """None when no estimate could be made (unknown model)."""


def fit_view(
    kind: str,
    model: str,
    gpu_mem_bytes: Sequence[int | None],
    context_len: int | None = None,
    *,
    files: FileShape | None = None,
    concurrent_seqs: int = 1,
) -> FitView:
    """The fit estimate (weights + KV cache vs the chosen GPUs' memory) in words; with
    ``files`` (the model as the node's inventory read it) the shape and weight type come
    from its files, else from the estimator's name table."""
    shape = files.shape if files else KNOWN_MODELS.get(model)
    if shape is None:
        known = ", ".join(KNOWN_MODELS)
        return FitView(
            f"fit: no estimate for {model!r} (not on the node; the estimator knows {known})",
            None,
        )
    mems = [m for m in gpu_mem_bytes if m]
    if not mems:
        return FitView("fit: pick at least one GPU with known memory", None)
    ctx = context_len or min(shape.max_context, 8192)
    try:
        est = estimate_fit(
            shape,
            kind,
            context_len=ctx,
            gpu_mem_total_bytes=min(mems),
            tp=len(mems),
            concurrent_seqs=concurrent_seqs,
            weight_dtype=files.weight_dtype if files else "fp16",
        )
    except KeyError:
        return FitView(f"fit: no memory rule for engine {kind!r}", None)
    source = " (from the node's files)" if files else ""  # else the name table, as ever
    return FitView(fit_text(est, ctx, concurrent_seqs) + source, est.fits)


def fit_text(est: FitEstimate, context_len: int, concurrent_seqs: int = 1) -> str:
    verdict = "fits" if est.fits else "DOES NOT FIT"
    seqs = f"{concurrent_seqs} × " if concurrent_seqs > 1 else ""
    return (
        f"fit per GPU: weights {est.weights_bytes / GIB:.1f} GiB + KV "
        f"{est.kv_bytes / GIB:.1f} GiB ({seqs}{context_len:,} ctx) = "
        f"{est.total_bytes / GIB:.1f} GiB of {est.budget_bytes / GIB:.1f} GiB budget: "
        f"{verdict}; ~{est.max_concurrent_at_context} full-length sequences"
    )


SWITCH_CHOICES = ("default", "on", "off")
"""A yes/no start option on a form: the engine's default, or asked on or off."""


def typed_options(
    *,
    prefix_caching: str = "default",
    chunked_prefill: str = "default",
    kv_cache_dtype: str = "",
    max_batched_tokens: str = "",
    prefill_chunk_tokens: str = "",
) -> LaunchFields:
    """A start form's typed options as the agent's launch fields (left out where the
    form leaves the engine's default); ValueError naming a field that is no number."""
    fields: LaunchFields = {}
    for name, choice in (("prefix_caching", prefix_caching), ("chunked_prefill", chunked_prefill)):
        if choice not in SWITCH_CHOICES:
            raise ValueError(f"{name} must be one of {', '.join(SWITCH_CHOICES)}")
        if choice != "default":
            fields[name] = choice == "on"
    if kv_cache_dtype.strip():
        fields["kv_cache_dtype"] = kv_cache_dtype.strip()
    for name, text in (
        ("max_batched_tokens", max_batched_tokens),
        ("prefill_chunk_tokens", prefill_chunk_tokens),
    ):
        if text.strip():
            try:
                fields[name] = int(text)
            except ValueError:
                raise ValueError(f"{name} must be a whole number of tokens, not {text!r}") from None
    return fields


def kv_check_text(kv: KvCapacity | None) -> str:
    """The engine's own KV capacity beside the estimate, in words ("" before the check)."""
    if kv is None:
        return ""

    def tokens(value: int | None, why: str) -> str:
        return f"n/a ({why})" if value is None else f"{value:,} tokens ({why})"

    text = (
        f"KV capacity {tokens(kv.reported_tokens, kv.source)}, "
        f"estimate {tokens(kv.estimated_tokens, kv.estimate_basis)}"
    )
    if kv.difference_tokens is not None:
        text += f", difference {kv.difference_tokens:+,}"
    return text


def _find(engines: Sequence[EngineInfo], engine_id: str) -> EngineInfo | None:
    return next((e for e in engines if e.id == engine_id), None)


DEFAULT_START_BUDGET_S = 300.0
"""The wait when an older agent does not say its health budget."""
START_MARGIN_S = 30.0
"""Beyond the agent's budget: its own verdict (crashed, with the reason) arrives first."""


async def wait_healthy(
    client: AgentLike,
    engine_id: str,
    progress: Progress,
    *,
    timeout_s: float | None = None,
    poll_s: float = 1.0,
) -> EngineInfo:
    """Follow the start until healthy. Without ``timeout_s`` the wait is the agent's own
    health budget for this start (``start_timeout_s``: the engine spec's, or the one the
    start asked for; a large vLLM load or a TRT-LLM build takes up to 30 min) plus a
    margin, so the screen never gives up before the agent does."""
    started = time.monotonic()
    deadline: float | None = None if timeout_s is None else started + timeout_s
    last = ""
    phase = PHASES[0]  # the agent accepted the start in this phase
    while True:
        info = _find(await client.engines(), engine_id)
        if info is None:
            raise EngineFailed(f"engine {engine_id} disappeared from the agent", phase=phase)
        if deadline is None:
            budget_s = (info.start_timeout_s or DEFAULT_START_BUDGET_S) + START_MARGIN_S
            deadline = started + budget_s
        if info.health == "healthy":
            kv = kv_check_text(info.kv_capacity)
            progress(
                f"{engine_id} is healthy at {info.url or '?'}" + (f"; {kv}" if kv else ""), 1.0
            )
            return info
        if info.state in FAILED_STATES:
            reason = info.message or "no reason given"
            raise EngineFailed(
                f"{engine_id} {info.state} while {phase}: {reason}",
                phase=phase,
                info=info,
            )
        if info.state in PHASES:
            phase = info.state
        step = PHASES.index(info.state) + 1 if info.state in PHASES else 1
        fraction: float | None = step / (len(PHASES) + 1)
        pull = info.image_pull
        if info.state == "starting" and pull is not None and pull.state == "pulling":
            fraction = pull.fraction  # the bar follows the pull's bytes (message says so)
        text = f"{engine_id}: {info.state}, health {info.health}"
        if info.message:
            text += f" — {info.message}"
        if info.last_log_line:
            text += f" | {info.last_log_line}"
        if text != last:
            progress(text, fraction)
            last = text
        if time.monotonic() > deadline:
            waited_s = time.monotonic() - started
            raise EngineFailed(
                f"{engine_id} not healthy after {waited_s:.0f}s ({info.state})",
                phase=phase,
                info=info,
            )
        await asyncio.sleep(poll_s)


async def start_engine(
    client: AgentLike,
    kind: str,
    config: LaunchFields,
    gpus: Sequence[int],
    progress: Progress,
    *,
    runtime: str | None = None,
    options: LaunchFields | None = None,
    health_timeout_s: float | None = None,
) -> EngineInfo:
    """Start and follow it to healthy; ``health_timeout_s`` replaces the engine spec's
    health wait on the agent (a large load), and the wait here follows it."""
    progress(f"asking the agent to start {kind} on GPU(s) {list(gpus) or 'none'}", 0.05)
    info = await client.start(
        kind,
        dict(config),
        list(gpus),
        runtime=runtime,
        options=options,
        wait=False,
        health_timeout_s=health_timeout_s,
    )
    progress(f"agent accepted: deployment {info.id}", 0.1)
    if info.state == "deployed":  # a Swarm service: the agents of its nodes list it
        progress(f"{info.id}: {info.message}", 1.0)
        return info
    return await wait_healthy(client, info.id, progress)


async def swap_engine(
    client: AgentLike,
    engine_id: str,
    config: LaunchFields,
    progress: Progress,
    *,
    kind: str | None = None,
    health_timeout_s: float | None = None,
) -> EngineInfo:
    """Swap to ``config`` (and ``kind``, else the same engine); the agent rolls back to
    the previous one when the new one fails (an AgentError 502 says so)."""
    progress(f"asking the agent to swap {engine_id}", 0.05)
    result = await client.swap(
        engine_id, dict(config), kind=kind, health_timeout_s=health_timeout_s
    )
    if result.state == "deployed":  # a Swarm service, redeployed: its nodes gate it
        progress(f"{result.id}: {result.message}", 1.0)
        return result
    # the agent answers with the deployment that replaced it (its id may be new)
    return await wait_healthy(client, result.id or engine_id, progress)


async def stop_engine(
    client: AgentLike, engine_id: str, progress: Progress, *, remove_volumes: Sequence[str] = ()
) -> EngineInfo:
    """Stop it; its volumes stay unless ``remove_volumes`` names them (their data goes)."""
    what = f" and remove volumes {', '.join(remove_volumes)}" if remove_volumes else ""
    progress(f"stopping {engine_id}{what}", 0.5)
    info = await client.stop(engine_id, remove_volumes=remove_volumes)
    progress(
        f"{engine_id} stopped" + (f", removed {', '.join(remove_volumes)}" if what else ""), 1.0
    )
    return info


async def scale_engine(
    client: AgentLike, engine_id: str, replicas: int, progress: Progress
) -> EngineInfo:
    """Ask the agent that deployed a Swarm engine for ``replicas`` of it: Swarm places
    them, and each node's agent lists the one it runs."""
    progress(f"asking Swarm for {replicas} replica(s) of {engine_id}", 0.5)
    info = await client.scale(engine_id, replicas)
    progress(f"{engine_id}: Swarm places {replicas} replica(s)", 1.0)
    return info


async def swarm_services(
    nodes: Sequence[NodeHandle],
) -> tuple[list[tuple[str, ServiceInfo]], list[str]]:
    """The Swarm services the agents of ``nodes`` deployed (a manager's agent lists them),
    each with the node whose agent scales it; and, in words, the nodes that did not say."""

    async def one(handle: NodeHandle) -> tuple[list[tuple[str, ServiceInfo]], str | None]:
        if handle.client is None:
            return [], f"{handle.name}: {handle.error or 'no agent client'}"
        try:
            _, services = await handle.client.listing()
        except Exception as exc:  # that node's agent is away: the others still count
            return [], f"{handle.name}: {exc}"
        return [(handle.name, s) for s in services], None

    found: list[tuple[str, ServiceInfo]] = []
    unanswered: list[str] = []
    for services, why in await asyncio.gather(*(one(n) for n in nodes)):
        found.extend(services)
        if why is not None:
            unanswered.append(why)
    return found, unanswered
