"""How the fleet's GPU and engine tables order and describe their rows, free of Textual.

One sort key orders both tables (as nvitop's and k9s's one key cycles the order): an
engine's GPU util and memory are its GPUs', a GPU's tok/s and KV cache are its engines'.
Numbers sort busiest first; a value not reported (n/a) sorts last, never as 0.
"""

from __future__ import annotations

import functools
import re
import signal
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Generic, TypeVar

from agents.protocol import EngineInfo
from control.model import NodeState, mem_pct
from telemetry import EngineTelemetry, GpuSample, TelemetryFrame


class SortKey(StrEnum):
    NODE = "node"
    UTIL = "GPU util"
    MEMORY = "memory"
    TOK_S = "tok/s"
    KV = "KV cache"

    def next(self) -> SortKey:
        order = list(SortKey)
        return order[(order.index(self) + 1) % len(order)]


GpuItem = tuple[NodeState, GpuSample]
EngineItem = tuple[NodeState, EngineTelemetry]
T = TypeVar("T")
V = TypeVar("V")


@dataclass(frozen=True, slots=True)
class Item(Generic[V]):
    """One table row: its key, what its cells are drawn from, and a version."""

    key: str
    version: object
    """Anything that changes when the row's cells would (its node's frame)."""
    value: V


def frame_version(node: NodeState) -> object:
    """What a row drawn from a node's frame changes with: that frame (its time as well as
    its sequence: an agent that restarted counts from 1 again)."""
    return (node.frame.seq, node.frame.ts) if node.frame else None


class NodeRows(Generic[V]):
    """One table's rows, made per node and again only when that node's frame changed: a
    redraw at 256 nodes x 8 GPUs reuses its 2,048 GPU rows, making only those of the
    nodes that sent a frame since."""

    def __init__(self, rows_of: Callable[[NodeState], Iterable[tuple[str, V]]]) -> None:
        self._rows_of = rows_of
        self._made: dict[str, tuple[TelemetryFrame | None, list[Item[V]]]] = {}

    def rows(self, nodes: Iterable[NodeState]) -> list[Item[V]]:
        """The rows of ``nodes``, in their order."""
        out: list[Item[V]] = []
        for node in nodes:
            made = self._made.get(node.name)
            if made is None or made[0] is not node.frame:
                version = frame_version(node)
                made = (node.frame, [Item(k, version, v) for k, v in self._rows_of(node)])
                self._made[node.name] = made
            out.extend(made[1])
        return out


def _engines_on(node: NodeState, gpu: GpuSample) -> list[EngineTelemetry]:
    return [e for e in node.engines if gpu.index in e.gpu_ids]


def _gpus_of(node: NodeState, engine: EngineTelemetry) -> list[GpuSample]:
    gpus = node.frame.gpus if node.frame else ()
    return [g for g in gpus if g.index in engine.gpu_ids]


def _mean(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None


def _total(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def gpu_value(key: SortKey, item: GpuItem) -> float | None:
    node, gpu = item
    if key is SortKey.UTIL:
        return gpu.util_pct
    if key is SortKey.MEMORY:
        return mem_pct(gpu)
    engines = _engines_on(node, gpu)
    if key is SortKey.TOK_S:
        return _total([e.generation_tok_s for e in engines])
    if key is SortKey.KV:
        usage = [e.kv_cache_usage for e in engines if e.kv_cache_usage is not None]
        return max(usage) if usage else None
    return None


def engine_value(key: SortKey, item: EngineItem) -> float | None:
    node, engine = item
    if key is SortKey.UTIL:
        return _mean([g.util_pct for g in _gpus_of(node, engine)])
    if key is SortKey.MEMORY:
        return _total([g.mem_used_bytes for g in _gpus_of(node, engine)])
    if key is SortKey.TOK_S:
        return engine.generation_tok_s
    if key is SortKey.KV:
        return engine.kv_cache_usage
    return None


def sort_rows(rows: list[T], key: SortKey, value: Callable[[SortKey, T], float | None]) -> list[T]:
    """``rows`` (built from ``by_name``'s nodes) in ``key``'s order: by node as they are,
    else busiest first by ``value`` with n/a last, ties in the node order."""
    if key is SortKey.NODE:
        return rows  # a redraw at 256 nodes must not sort 2,048 rows for nothing

    def rank(row: T) -> tuple[bool, float]:
        v = value(key, row)
        return (v is None, -(v or 0.0))

    return sorted(rows, key=rank)


@functools.lru_cache(maxsize=4096)  # the fleet's node names, asked at every redraw
def natural(text: str) -> tuple[tuple[int, int | str], ...]:
    """A sort key that orders the numbers in names by value (node-2 before node-10)."""
    return tuple(
        (0, int(part)) if part.isdigit() else (1, part) for part in re.split(r"(\d+)", text) if part
    )


def by_name(nodes: Sequence[NodeState]) -> list[NodeState]:
    """The nodes by name, h200-2 before h200-10: the tables' node order."""
    return sorted(nodes, key=lambda n: natural(n.name))


def uptime_s(engine: EngineTelemetry, frame_ts: float) -> float | None:
    """How long the engine has run, on the node's own clock (None: the agent did not say)."""
    if engine.started_at is None:
        return None
    return max(0.0, frame_ts - engine.started_at)


def fmt_duration(seconds: float | None) -> str:
    """A duration in the two largest units: 45s, 12m05s, 3h04m, 2d05h; n/a when unknown."""
    if seconds is None:
        return "n/a"
    s = int(seconds)
    days, s = divmod(s, 86400)
    hours, s = divmod(s, 3600)
    minutes, s = divmod(s, 60)
    if days:
        return f"{days}d{hours:02d}h"
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{s:02d}s"
    return f"{s}s"


def model_label(model: str | None) -> str:
    """A model as a narrow column shows it: its last path part (a file's name, a Hugging
    Face id's model without its org); the detail pane shows it whole."""
    if not model:
        return "-"
    return model.rstrip("/").rsplit("/", 1)[-1]


def gpus_label(gpu_ids: Sequence[int]) -> str:
    """GPU indices with runs as ranges: 0-3, 0,2, 0-3,6; "-" for none."""
    parts: list[str] = []
    for i in sorted(set(gpu_ids)):
        if parts and parts[-1].split("-")[-1] == str(i - 1):
            parts[-1] = f"{parts[-1].split('-')[0]}-{i}"
        else:
            parts.append(str(i))
    return ",".join(parts) or "-"


NODE_WIDTH_MIN = 6
NODE_WIDTH_MAX = 24
"""A node column wide enough for the fleet's longest name, within these bounds (a longer
name is cut with an ellipsis rather than pushing every other column off screen)."""


def node_column_width(names: Sequence[str]) -> int:
    longest = max((len(n) for n in names), default=0)
    return min(max(longest, NODE_WIDTH_MIN), NODE_WIDTH_MAX)


def exit_reason(exit_code: int | None) -> str:
    """A crashed engine's exit status in words: a signal by name, 137 as the OOM killer's
    usual mark (Docker and shells report 128 + the signal; a Popen a negative number)."""
    if exit_code is None:
        return "exit status unknown"
    number = -exit_code if exit_code < 0 else exit_code - 128 if exit_code > 128 else 0
    if number:
        try:
            name = signal.Signals(number).name
        except ValueError:
            return f"exit code {exit_code}"
        hint = " (often the out-of-memory killer)" if number == signal.SIGKILL else ""
        return f"exit code {exit_code}: killed by {name}{hint}"
    return f"exit code {exit_code}" + (" (an error it reported)" if exit_code else "")


DETAIL_LOG_LINES = 12
"""How many of its newest log lines the engine's detail pane shows."""


def engine_detail(
    engine: EngineTelemetry,
    frame_ts: float | None,
    info: EngineInfo | None,
    log_lines: Sequence[str],
    note: str | None = None,
) -> list[str]:
    """The selected engine in words: what it runs and where, its start config, why it
    ended (a crash's exit status and the agent's message), why its last scrape failed
    and its newest log lines.
    ``info``: the agent's answer for it (None until it came); ``note``: why it did not."""
    up = uptime_s(engine, frame_ts) if frame_ts is not None else None
    lines = [
        f"{engine.id}  {engine.kind} · {engine.runtime or 'n/a'} · model {engine.model or '-'}",
        f"GPUs {gpus_label(engine.gpu_ids)} · port {engine.port or '-'} · up "
        f"{fmt_duration(up)} · {engine.state} / {engine.health}",
    ]
    if info is not None:
        config = " ".join(f"{k}={_plain(v)}" for k, v in sorted(info.config.items()))
        lines.append(f"config: {config or '(defaults)'}")
        if info.engine_version:
            lines.append(f"version: {info.engine_version}")
    if engine.state == "crashed" or (info is not None and info.state == "crashed"):
        code = engine.exit_code
        if code is None and info is not None:
            code = info.exit_code
        lines.append(f"CRASHED: {exit_reason(code)}")
        if info is not None and info.message:
            lines.append(f"  {info.message}")
    elif info is not None and info.message:
        lines.append(info.message)
    if engine.scrape_error:  # why its row's figures are n/a (the agent's words)
        lines.append(f"scrape failed: {engine.scrape_error}")
    if note:
        lines.append(note)
    if log_lines:
        lines.append(f"last {len(log_lines)} log lines:")
        lines.extend(log_lines)
    elif engine.last_log_line:
        lines.append(f"last log line: {engine.last_log_line}")
    return lines


def _plain(value: object) -> str:
    if isinstance(value, list | tuple):
        return " ".join(str(v) for v in value)
    return str(value)
