"""What the TUI knows about the fleet, free of Textual.

Workers feed frames and errors in; screens read the latest frame per node and
short histories for sparklines and charts.  Only the newest frame per node is
kept (older ones are folded into the histories), so a slow terminal never has a
queue of stale frames to work through.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from itertools import islice

from telemetry import EngineTelemetry, GpuSample, TelemetryFrame

HISTORY_POINTS = 600
"""Ten minutes at 1 Hz: the Node screen's charts span this."""

SPARK_CHARS = "▁▂▃▄▅▆▇█"


class NodeStatus(StrEnum):
    CONNECTING = "connecting"
    OK = "ok"
    ERROR = "error"


@dataclass(slots=True)
class GpuHistory:
    ts: deque[float] = field(default_factory=lambda: deque(maxlen=HISTORY_POINTS))
    util_pct: deque[float | None] = field(default_factory=lambda: deque(maxlen=HISTORY_POINTS))
    mem_pct: deque[float | None] = field(default_factory=lambda: deque(maxlen=HISTORY_POINTS))
    power_w: deque[float | None] = field(default_factory=lambda: deque(maxlen=HISTORY_POINTS))
    temp_c: deque[float | None] = field(default_factory=lambda: deque(maxlen=HISTORY_POINTS))

    def add(self, ts: float, gpu: GpuSample) -> None:
        self.ts.append(ts)
        self.util_pct.append(gpu.util_pct)
        self.mem_pct.append(mem_pct(gpu))
        self.power_w.append(gpu.power_w)
        self.temp_c.append(gpu.temp_c)


@dataclass(slots=True)
class NodeState:
    name: str
    url: str = ""
    status: NodeStatus = NodeStatus.CONNECTING
    error: str | None = None
    frame: TelemetryFrame | None = None
    last_frame_at: float | None = None
    """Local clock when the newest frame arrived (not the node's own clock)."""
    retry_in_s: float | None = None
    failures: int = 0
    link: str | None = None
    """The state of the ssh tunnel the node is reached through, in words (None: no tunnel)."""
    link_up: bool = False
    gpu_history: dict[int, GpuHistory] = field(default_factory=dict)
    engine_tok_s: dict[str, deque[float | None]] = field(default_factory=dict)

    @property
    def engines(self) -> tuple[EngineTelemetry, ...]:
        return self.frame.engines if self.frame else ()


class FleetModel:
    """Latest frame and history per node; every mutation bumps ``version``."""

    def __init__(self, names: Iterable[tuple[str, str]] = ()) -> None:
        self.nodes: dict[str, NodeState] = {}
        self.version = 0
        for name, url in names:
            self.add_node(name, url)

    def add_node(self, name: str, url: str = "") -> NodeState:
        state = self.nodes.get(name)
        if state is None:
            state = self.nodes[name] = NodeState(name=name, url=url)
            self.version += 1
        return state

    def ingest(self, name: str, frame: TelemetryFrame, received_at: float) -> None:
        node = self.add_node(name)
        previous = node.frame
        if previous is not None and frame.seq <= previous.seq and frame.ts <= previous.ts:
            return  # a replayed or duplicated frame after a reconnect
        node.frame = frame
        node.last_frame_at = received_at
        node.status = NodeStatus.OK
        node.error = None
        node.retry_in_s = None
        node.failures = 0
        # a history made only for a GPU or engine seen first (``setdefault`` would make, and
        # throw away, five 600-point deques per GPU per frame: 256 frames a second at 256 nodes)
        for gpu in frame.gpus:
            history = node.gpu_history.get(gpu.index)
            if history is None:
                history = node.gpu_history[gpu.index] = GpuHistory()
            history.add(frame.ts, gpu)
        for eng in frame.engines:
            tok_s = node.engine_tok_s.get(eng.id)
            if tok_s is None:
                tok_s = node.engine_tok_s[eng.id] = deque(maxlen=HISTORY_POINTS)
            tok_s.append(eng.generation_tok_s)
        if len(node.engine_tok_s) > len(frame.engines):
            # an engine gone from its node's frames takes its history along: kept, every
            # engine ever started and stopped would stay in the TUI's memory for good
            for gone in node.engine_tok_s.keys() - {eng.id for eng in frame.engines}:
                del node.engine_tok_s[gone]
        self.version += 1

    def mark_error(self, name: str, message: str, retry_in_s: float | None) -> None:
        node = self.add_node(name)
        node.status = NodeStatus.ERROR
        node.error = message
        node.retry_in_s = retry_in_s
        node.failures += 1
        self.version += 1

    def set_link(self, name: str, text: str, up: bool) -> None:
        node = self.add_node(name)
        node.link, node.link_up = text, up
        self.version += 1

    def engines(self) -> list[tuple[str, EngineTelemetry]]:
        return [(n.name, e) for n in self.nodes.values() for e in n.engines]


def mem_pct(gpu: GpuSample) -> float | None:
    if gpu.mem_used_bytes is None or not gpu.mem_total_bytes:
        return None
    return 100.0 * gpu.mem_used_bytes / gpu.mem_total_bytes


def sparkline(
    values: Iterable[float | None], width: int, lo: float = 0.0, hi: float | None = None
) -> str:
    """The last ``width`` values as block characters; a gap (n/a) is a space."""
    if isinstance(values, deque | list | tuple):
        # the newest ``width`` from the right end, without copying 600 points
        tail = list(islice(reversed(values), width))[::-1]
    else:
        tail = list(values)[-width:]
    known = [v for v in tail if v is not None]
    if not known:
        return " " * len(tail)
    top = hi if hi is not None else max(known)
    span = (top - lo) or 1.0
    out = []
    for v in tail:
        if v is None:
            out.append(" ")
            continue
        level = int((min(max(v, lo), top) - lo) / span * (len(SPARK_CHARS) - 1) + 0.5)
        out.append(SPARK_CHARS[level])
    return "".join(out)


def gauge(fraction: float | None, width: int = 10) -> str:
    """A text bar for a 0-1 fraction; "n/a" when unknown (never an empty bar)."""
    if fraction is None:
        return "n/a".ljust(width + 5)
    f = min(max(fraction, 0.0), 1.0)
    filled = int(f * width + 0.5)
    return "█" * filled + "░" * (width - filled) + f" {f * 100:3.0f}%"


def fmt(value: float | None, unit: str = "", digits: int = 0) -> str:
    if value is None:
        return "n/a"
    return f"{value:,.{digits}f}{unit}"


def fmt_bytes(value: float | None) -> str:
    if value is None:
        return "n/a"
    gib = value / 2**30
    return f"{gib:,.1f}G"
