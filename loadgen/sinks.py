"""Where finished requests go, one at a time, as they finish.

A crash mid-run loses at most the requests still in flight: the JSONL sink
writes and flushes each record to the OS the moment it is handed over.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, Protocol

from runs.codec import record_from_dict, record_to_dict, summary_from_dict, summary_to_dict
from runs.records import LevelSummary, RequestRecord


class RecordSink(Protocol):
    def write(self, record: RequestRecord) -> None: ...

    def level(self, summary: LevelSummary) -> None: ...

    def close(self) -> None: ...


class JsonlSink:
    """One JSON object per line: ``{"type": "request", ...}`` or ``{"type": "level", ...}``."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._file: IO[str] = self.path.open("a", encoding="utf-8")

    def _put(self, kind: str, data: dict[str, Any]) -> None:
        self._file.write(json.dumps({"type": kind, **data}, separators=(",", ":")) + "\n")
        self._file.flush()

    def write(self, record: RequestRecord) -> None:
        self._put("request", record_to_dict(record))

    def level(self, summary: LevelSummary) -> None:
        self._put("level", summary_to_dict(summary))

    def close(self) -> None:
        self._file.close()


def read_jsonl(path: str | Path) -> tuple[list[RequestRecord], list[LevelSummary]]:
    """Read a JSONL sink back; a torn last line (crash while writing) is skipped."""
    records: list[RequestRecord] = []
    levels: list[LevelSummary] = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        try:
            data = json.loads(line)
        except json.JSONDecodeError:
            continue
        kind = data.pop("type", None)
        if kind == "request":
            records.append(record_from_dict(data))
        elif kind == "level":
            data.pop("failure_rate", None)
            levels.append(summary_from_dict(data))
    return records, levels


class MemorySink:
    """Keeps everything in lists: for tests and for callers that summarise themselves."""

    def __init__(self) -> None:
        self.records: list[RequestRecord] = []
        self.levels: list[LevelSummary] = []
        self.closed = False

    def write(self, record: RequestRecord) -> None:
        self.records.append(record)

    def level(self, summary: LevelSummary) -> None:
        self.levels.append(summary)

    def close(self) -> None:
        self.closed = True


class FanoutSink:
    """Hands every record to several sinks (e.g. a JSONL file and the store).

    One failing sink (a full disk) does not starve the others: each gets the
    record, then the first error is raised.
    """

    def __init__(self, *sinks: RecordSink) -> None:
        self.sinks = sinks

    def _each(self, call: Callable[[RecordSink], None]) -> None:
        first: Exception | None = None
        for sink in self.sinks:
            try:
                call(sink)
            except Exception as exc:
                first = first or exc
        if first is not None:
            raise first

    def write(self, record: RequestRecord) -> None:
        self._each(lambda sink: sink.write(record))

    def level(self, summary: LevelSummary) -> None:
        self._each(lambda sink: sink.level(summary))

    def close(self) -> None:
        self._each(lambda sink: sink.close())
