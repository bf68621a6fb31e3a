"""Faults the simulator can inject, each switchable per run.

Every decision is drawn from ``random.Random(f"{seed}:{request_index}:...")``,
so a run with the same seed fails the same requests in the same way.
"""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class FaultConfig:
    error_rate: float = 0.0
    """Fraction of requests answered HTTP 500 at once."""
    drop_rate: float = 0.0
    """Fraction of streams whose connection is cut after some tokens."""
    stall_rate: float = 0.0
    """Fraction of streams that freeze for ``stall_s`` mid-stream."""
    stall_s: float = 0.0
    crash_after: int | None = None
    """The server dies (all streams cut, port closed) when request N+1 arrives."""
    load_time_s: float | None = None
    """Slow start: seconds spent "loading the model" (overrides the profile's)."""

    def __post_init__(self) -> None:
        for name in ("error_rate", "drop_rate", "stall_rate"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be within 0..1, got {value}")
        if self.stall_s < 0 or (self.load_time_s is not None and self.load_time_s < 0):
            raise ValueError("stall_s and load_time_s must be >= 0")
        if self.crash_after is not None and self.crash_after < 0:
            raise ValueError("crash_after must be >= 0")


@dataclass(frozen=True, slots=True)
class RequestFaults:
    error: bool = False
    drop_after_tokens: int | None = None
    stall_after_tokens: int | None = None


def faults_for(config: FaultConfig, seed: int, request_index: int, tokens: int) -> RequestFaults:
    """This request's fate under ``config``: fixed by seed and arrival index."""
    rng = random.Random(f"{seed}:{request_index}:faults")
    error = rng.random() < config.error_rate
    drop = rng.random() < config.drop_rate
    stall = rng.random() < config.stall_rate and config.stall_s > 0
    cut = rng.randint(1, max(1, tokens - 1))
    pause = rng.randint(1, max(1, tokens - 1))
    return RequestFaults(
        error=error,
        drop_after_tokens=cut if drop and not error else None,
        stall_after_tokens=pause if stall and not error else None,
    )
