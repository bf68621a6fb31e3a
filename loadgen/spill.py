"""Exact percentiles of a level's values in bounded memory.

A long level at a high rate has more inter-token gaps than memory should hold (a
10-minute level at 50k tokens/s: 30 million), yet its percentiles must be exact
(docs/design.md, "Metric definitions").  ``SpilledValues`` keeps up to ``block``
values in a compact array and appends each full block to an anonymous temporary
file (unlinked at once: nothing is left behind); the run itself only appends.  At
the level's end each block of the file is sorted in place (``finish_block`` values
at a time, outside the measured window) and every wanted rank is found by a binary
search over the values' order: for a candidate value the count of values at or
below it is a ``bisect`` in each sorted block, read through ``mmap`` (a few pages
each).  A level that never filled a block is sorted in memory, as before.
"""

from __future__ import annotations

import bisect
import itertools
import math
import mmap
import struct
import tempfile
from array import array
from collections.abc import Iterable, Sequence
from typing import IO

from runs.records import Percentiles

QUANTILES = (0.5, 0.9, 0.95, 0.99, 0.999)
BLOCK_VALUES = 65_536
"""Values held in memory per metric before they go to the file (512 KiB)."""
FINISH_BLOCK_VALUES = 262_144
"""Values sorted at once at the end (a transient 2 MiB array and its sorted list, about
10 MiB more)."""
_SIGN = 1 << 63
_MASK = (1 << 64) - 1


def quantile(sorted_values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default ``linear``)."""
    if not sorted_values:
        raise ValueError("quantile of no values")
    pos = (len(sorted_values) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def percentiles(values: Iterable[float]) -> Percentiles:
    ordered = sorted(values)
    if not ordered:
        return Percentiles()
    p50, p90, p95, p99, p999 = (quantile(ordered, q) for q in QUANTILES)
    # fsum: the exactly rounded sum, the same whatever order the values came in
    return Percentiles(p50, p90, p95, p99, p999, math.fsum(ordered) / len(ordered))


def _key(value: float) -> int:
    """An integer in the order of the floats (IEEE 754 bits, sign folded)."""
    bits: int = struct.unpack("<Q", struct.pack("<d", value))[0]
    return (~bits & _MASK) if bits & _SIGN else bits | _SIGN


def _value(key: int) -> float:
    bits = key & ~_SIGN if key & _SIGN else ~key & _MASK
    (value,) = struct.unpack("<d", struct.pack("<Q", bits))
    return float(value)


class SpilledValues:
    """Floats appended one at a time; their exact percentiles at the end."""

    __slots__ = ("_block", "_buffer", "_file", "_spilled", "count", "high", "low")

    def __init__(self, block: int = BLOCK_VALUES) -> None:
        self._block = block
        self._buffer = array("d")
        self._file: IO[bytes] | None = None
        self._spilled = 0
        self.count = 0
        self.low = math.inf
        self.high = -math.inf

    def add(self, value: float) -> None:
        self._buffer.append(value)
        self.count += 1
        if value < self.low:
            self.low = value
        if value > self.high:
            self.high = value
        if len(self._buffer) >= self._block:
            self._spill()

    def extend(self, values: Sequence[float]) -> None:
        if not values:
            return
        self._buffer.extend(values)
        self.count += len(values)
        self.low = min(self.low, min(values))
        self.high = max(self.high, max(values))
        if len(self._buffer) >= self._block:
            self._spill()

    def _spill(self) -> None:
        if self._file is None:
            self._file = tempfile.TemporaryFile(prefix="infer-top-level-")
        self._buffer.tofile(self._file)
        self._spilled += len(self._buffer)
        self._buffer = array("d")

    def percentiles(self) -> Percentiles:
        """The values' percentiles and mean, exact; the file is closed after."""
        if self._file is None:
            values = self._buffer
            self._buffer = array("d")
            return percentiles(values)
        try:
            self._spill()
            return self._from_file(self._file)
        finally:
            self._file.close()
            self._file = None

    def _from_file(self, file: IO[bytes]) -> Percentiles:
        size = array("d").itemsize
        runs: list[tuple[int, int]] = []  # (first value, values) of each sorted block
        file.seek(0)
        for first in range(0, self._spilled, FINISH_BLOCK_VALUES):
            chunk = array("d")
            chunk.fromfile(file, min(FINISH_BLOCK_VALUES, self._spilled - first))
            ordered = array("d", sorted(chunk))
            file.seek(first * size)
            ordered.tofile(file)
            runs.append((first, len(ordered)))
        file.flush()
        with mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
            view = memoryview(mapped).cast("d")
            try:
                blocks = [view[first : first + n] for first, n in runs]
                try:
                    ranked = _Ranked(blocks, self.low, self.high)
                    points = [self._quantile(ranked, q) for q in QUANTILES]
                    # One fsum over every value: a sum of the blocks' (each rounded)
                    # sums can be an ulp off the exactly rounded one
                    total = math.fsum(itertools.chain.from_iterable(blocks))
                finally:
                    for block in blocks:
                        block.release()
            finally:
                view.release()
        p50, p90, p95, p99, p999 = points
        return Percentiles(p50, p90, p95, p99, p999, total / self.count)

    def _quantile(self, ranked: _Ranked, q: float) -> float:
        pos = (self.count - 1) * q
        lo = int(pos)
        low = ranked.at(lo)
        high = ranked.at(min(lo + 1, self.count - 1))
        return low + (high - low) * (pos - lo)


class _Ranked:
    """The k-th smallest of several sorted blocks, by binary search over the floats'
    order: the smallest value whose count of values at or below it exceeds k."""

    def __init__(self, blocks: Sequence[Sequence[float]], low: float, high: float) -> None:
        self.blocks = blocks
        self.low, self.high = _key(low), _key(high)

    def _upto(self, value: float) -> int:
        return sum(bisect.bisect_right(block, value) for block in self.blocks)

    def at(self, k: int) -> float:
        lo, hi = self.low, self.high  # the answer's key lies in [lo, hi]
        while lo < hi:
            mid = (lo + hi) // 2
            if self._upto(_value(mid)) > k:
                hi = mid
            else:
                lo = mid + 1
        return _value(lo)
