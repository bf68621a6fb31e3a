"""Retry delays: doubling up to a cap (a node's telemetry stream, an SSH tunnel)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Backoff:
    """Retry delays for a node that stopped answering: doubling up to a cap."""

    initial_s: float = 0.5
    max_s: float = 3.0
    """However long a node was down, it is back on screen within about this (plus its first
    frame) of answering again: the 5 s of docs/reliability.md. A retry costs one connect."""

    def delay(self, failures: int) -> float:
        return min(self.max_s, self.initial_s * 2.0 ** max(0, failures - 1))
