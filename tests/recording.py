"""A recorder stand-in for node-run tests: the store's real recorder, plus every event
handed to it, so a test can count what reached the control plane."""

from __future__ import annotations

from runs.events import RunEvent
from runs.records import RequestRecord
from store import RunRecorder


class Seen:
    """The recorder, and every event handed to it."""

    def __init__(self, recorder: RunRecorder) -> None:
        self.recorder = recorder
        self.events: list[RunEvent] = []

    def on_event(self, event: RunEvent, /) -> None:
        self.events.append(event)
        self.recorder.on_event(event)

    @property
    def records(self) -> list[RequestRecord]:
        return [e for e in self.events if isinstance(e, RequestRecord)]

    @property
    def keys(self) -> list[tuple[int, int]]:
        """(level, request) of every record seen: a record resumed twice shows twice."""
        return [(r.level_index, r.request_index) for r in self.records]
