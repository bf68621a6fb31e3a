"""What an alert is: one raised condition on one node, GPU, engine or run, from the
moment its hold-down let it through until its condition stayed gone as long."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class Severity(StrEnum):
    CRITICAL = "critical"
    WARNING = "warning"
    INFO = "info"


@dataclass(frozen=True, slots=True)
class Observation:
    """A rule's verdict on one target at one instant: its condition holds, with the
    value that made it hold and the words an operator reads."""

    rule: str
    node: str
    gpu_index: int | None = None
    engine_id: str | None = None
    run_id: str | None = None
    """Set by the run rule only: the run whose failures raised it."""
    value: float | None = None
    message: str = ""

    @property
    def key(self) -> tuple[str, str, str]:
        """(rule, node, target): one alert at most is active per key."""
        return self.rule, self.node, target_of(self.gpu_index, self.engine_id)


def target_of(gpu_index: int | None, engine_id: str | None) -> str:
    """What on a node an alert is about, in words ("" for the node itself)."""
    if engine_id is not None:
        return f"engine {engine_id}"
    return "" if gpu_index is None else f"gpu{gpu_index}"


@dataclass(frozen=True, slots=True)
class Alert:
    """One alert, active (``cleared_at`` None) or past; the store keeps it as a row."""

    id: str
    rule: str
    title: str
    """The rule's name in words: "engine exited", "power throttled"."""
    severity: Severity
    node: str
    gpu_index: int | None
    engine_id: str | None
    value: float | None
    """The rule's value when it was raised (exit code, watts, °C, fraction, seconds)."""
    message: str
    raised_at: float
    """Epoch seconds: when the hold-down let it through."""
    cleared_at: float | None = None
    acked_at: float | None = None
    """When the operator acknowledged (silenced) it; it stays listed, not counted."""
    run_id: str | None = None
    """The load run active on its node or engine when it was raised, or the run it is about."""

    @property
    def active(self) -> bool:
        return self.cleared_at is None

    @property
    def target(self) -> str:
        return target_of(self.gpu_index, self.engine_id)

    def to_json(self) -> dict[str, Any]:
        """The alert as hooks, ``infer-top alerts --json`` and the store's rows see it."""
        data = dataclasses.asdict(self)
        data["severity"] = str(self.severity)
        data["active"] = self.active
        return data
