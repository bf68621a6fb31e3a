"""The progress an engine streams while it pulls a model by name (Ollama's
``POST /api/pull``): one JSON object a line, ``{"status", "digest", "total",
"completed"}`` (api.ProgressResponse), ``{"status": "success"}`` last, or
``{"error": ...}`` where the pull failed after the stream began."""

from __future__ import annotations

import json
from dataclasses import dataclass

PULL_DONE_STATUS = "success"


@dataclass(frozen=True, slots=True)
class PullProgress:
    status: str
    total_bytes: int | None = None
    completed_bytes: int | None = None
    error: str | None = None

    @property
    def done(self) -> bool:
        return self.error is None and self.status == PULL_DONE_STATUS

    def text(self) -> str:
        """``pulling 6a0746a1ec1a: 25% of 2.0 GB``; the bare status where no sizes came."""
        if not self.total_bytes:
            return self.status
        done = self.completed_bytes or 0
        return f"{self.status}: {done / self.total_bytes:.0%} of {_size(self.total_bytes)}"


def parse_pull_line(line: str | bytes) -> PullProgress:
    """One line of the pull stream; ValueError for anything but a progress object."""
    try:
        data = json.loads(line)
    except (ValueError, RecursionError) as exc:
        raise ValueError(f"a pull progress line that is not JSON: {line[:120]!r}") from exc
    if not isinstance(data, dict):
        raise ValueError(f"a pull progress line that is not an object: {line[:120]!r}")
    if data.get("error") is not None:
        return PullProgress(status="error", error=str(data["error"]))
    status = data.get("status")
    if not isinstance(status, str):
        raise ValueError(f"a pull progress line without a status: {line[:120]!r}")
    return PullProgress(status, _count(data.get("total")), _count(data.get("completed")))


def _count(value: object) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return None


def _size(n_bytes: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n_bytes >= scale:
            return f"{n_bytes / scale:.1f} {unit}"
    return f"{n_bytes} B"
