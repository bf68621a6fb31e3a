"""Load profiles: closed-loop concurrency levels, open-loop arrival rates, SLOs."""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from enum import StrEnum

from runs.units import DurationError, parse_duration_s


class ProfileError(ValueError):
    """A load profile or SLO that makes no sense."""


class Arrival(StrEnum):
    POISSON = "poisson"
    GAMMA = "gamma"
    CONSTANT = "constant"


@dataclass(frozen=True, slots=True)
class ClosedLoop:
    """Keep ``concurrency`` requests in flight: a new one starts as one ends."""

    concurrency: int

    def __post_init__(self) -> None:
        if self.concurrency < 1:
            raise ProfileError(f"concurrency must be >= 1, got {self.concurrency}")

    @property
    def in_flight_cap(self) -> int | None:
        return self.concurrency

    @property
    def offered_rps(self) -> float | None:
        return None


@dataclass(frozen=True, slots=True)
class OpenLoop:
    """Send at ``rate_rps`` whatever the server does (arrivals are not held back by it)."""

    rate_rps: float
    arrival: Arrival = Arrival.POISSON
    burstiness: float = 1.0
    """Gamma shape: 1 is Poisson, < 1 burstier, > 1 more regular (vLLM's meaning)."""
    max_concurrency: int | None = None

    def __post_init__(self) -> None:
        if not self.rate_rps > 0:
            raise ProfileError(f"rate must be > 0 requests/s, got {self.rate_rps}")
        if not self.burstiness > 0:
            raise ProfileError(f"burstiness must be > 0, got {self.burstiness}")
        if self.max_concurrency is not None and self.max_concurrency < 1:
            raise ProfileError("max_concurrency must be >= 1")

    @property
    def in_flight_cap(self) -> int | None:
        return self.max_concurrency

    @property
    def offered_rps(self) -> float | None:
        return self.rate_rps

    def gaps_s(self, seed: int) -> Iterator[float]:
        """Inter-arrival gaps in seconds, deterministic for a seed."""
        rng = random.Random(seed)
        if self.arrival is Arrival.CONSTANT:
            while True:
                yield 1.0 / self.rate_rps
        shape = 1.0 if self.arrival is Arrival.POISSON else self.burstiness
        scale = 1.0 / (self.rate_rps * shape)
        while True:
            yield rng.gammavariate(shape, scale)


Level = ClosedLoop | OpenLoop


@dataclass(frozen=True, slots=True)
class Slo:
    ttft_s: float | None = None
    tpot_s: float | None = None
    e2e_s: float | None = None

    def met_by(self, ttft_s: float | None, tpot_s: float | None, e2e_s: float | None) -> bool:
        if self.ttft_s is not None and (ttft_s is None or ttft_s > self.ttft_s):
            return False
        # A one-token answer has no TPOT, so it cannot miss a TPOT objective.
        if self.tpot_s is not None and tpot_s is not None and tpot_s > self.tpot_s:
            return False
        return not (self.e2e_s is not None and (e2e_s is None or e2e_s > self.e2e_s))


@dataclass(frozen=True, slots=True)
class LoadSpec:
    levels: tuple[Level, ...]
    requests_per_level: int | None = None
    """Stop a level after this many measured requests (warm-up not included)."""
    duration_s: float | None = None
    """Stop sending after this long of measured time (after warm-up)."""
    warmup_requests: int = 0
    warmup_s: float = 0.0
    drain_s: float = 30.0
    """After a duration stop, in-flight requests get this long, then count as incomplete."""
    request_timeout_s: float = 600.0
    stall_timeout_s: float = 60.0
    slo: Slo | None = None
    seed: int = 0
    min_requests_per_client: int = 0
    """With ``requests_per_level``: a closed-loop level sends at least this many per
    client, so at high concurrency every client sends more than one (the count is
    ``max(requests_per_level, min_requests_per_client * concurrency)``)."""

    def __post_init__(self) -> None:
        if not self.levels:
            raise ProfileError("a load spec needs at least one level")
        if self.requests_per_level is None and self.duration_s is None:
            raise ProfileError("say when a level stops: requests_per_level or duration_s")
        if self.requests_per_level is not None and self.requests_per_level < 1:
            raise ProfileError("requests_per_level must be >= 1")
        if self.min_requests_per_client < 0:
            raise ProfileError("min_requests_per_client must be >= 0")
        if self.duration_s is not None and not self.duration_s > 0:
            raise ProfileError("duration_s must be > 0")
        if self.warmup_requests < 0 or self.warmup_s < 0 or self.drain_s < 0:
            raise ProfileError("warm-up and drain must be >= 0")
        if not (self.request_timeout_s > 0 and self.stall_timeout_s > 0):
            raise ProfileError("timeouts must be > 0")

    def requests_for(self, level: Level) -> int | None:
        """Measured requests ``level`` sends (None when it stops by duration)."""
        if self.requests_per_level is None or not isinstance(level, ClosedLoop):
            return self.requests_per_level
        return max(self.requests_per_level, self.min_requests_per_client * level.concurrency)

    @property
    def max_in_flight(self) -> int | None:
        """The most requests in flight at once; None when an open-loop level has no cap."""
        caps = [level.in_flight_cap for level in self.levels]
        return None if None in caps else max(c for c in caps if c is not None)


def concurrency_sweep(values: Sequence[int]) -> tuple[Level, ...]:
    return tuple(ClosedLoop(v) for v in values)


def parse_slo(text: str) -> Slo:
    """``ttft=500ms,tpot=50ms,e2e=10s`` -> :class:`Slo`."""
    values: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = part.partition("=")
        key = key.strip().lower()
        if not sep or key not in {"ttft", "tpot", "e2e"}:
            raise ProfileError(f"bad SLO {part!r}: use ttft=, tpot= or e2e= with a duration")
        try:
            values[f"{key}_s"] = parse_duration_s(value)
        except DurationError as exc:
            raise ProfileError(f"bad SLO {part!r}: {exc}") from None
    if not values:
        raise ProfileError("an SLO needs at least one of ttft, tpot, e2e")
    return Slo(**values)
