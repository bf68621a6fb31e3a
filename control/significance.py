"""Is a change between two runs' request samples more than noise?  A percentile bootstrap.

Each run's requests are resampled with replacement (whole requests, so a statistic over a
request's several values keeps them together), the statistic is taken on both resamples,
and the spread of its change over many resamples is the confidence interval.  A change is
significant when the interval does not hold zero.  Standard library only (no numpy/scipy
on a node or a CI runner); seeded, so one pair of runs always gets the same verdict.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")

RESAMPLES = 1000
CONFIDENCE = 0.95


@dataclass(frozen=True, slots=True)
class Interval:
    low: float
    high: float

    @property
    def holds_zero(self) -> bool:
        return self.low <= 0.0 <= self.high


def change(base: float, new: float, *, relative: bool) -> float | None:
    """new / base - 1 (relative) or new - base; None where a relative base is 0."""
    if not relative:
        return new - base
    return None if base == 0 else new / base - 1.0


def bootstrap_change(
    base: Sequence[T],
    new: Sequence[T],
    statistic: Callable[[Sequence[T]], float | None],
    *,
    relative: bool,
    resamples: int = RESAMPLES,
    confidence: float = CONFIDENCE,
    seed: int = 0,
) -> Interval | None:
    """The ``confidence`` interval of the statistic's change from ``base`` to ``new``;
    None with fewer than two samples a side (nothing to judge)."""
    if len(base) < 2 or len(new) < 2:
        return None
    rng = random.Random(seed)
    changes: list[float] = []
    for _ in range(resamples):
        a = statistic(rng.choices(base, k=len(base)))
        b = statistic(rng.choices(new, k=len(new)))
        if a is None or b is None:
            continue
        c = change(a, b, relative=relative)
        if c is not None:
            changes.append(c)
    if len(changes) < resamples // 2:
        return None  # the statistic is undefined on most resamples
    changes.sort()
    tail = (1.0 - confidence) / 2
    low = changes[int(tail * (len(changes) - 1))]
    high = changes[round((1.0 - tail) * (len(changes) - 1))]
    return Interval(low, high)
