"""One streamed answer's SSE events, taken as its bytes arrive.

:class:`SseSink` is fed each run of body bytes with the time they reached Python (from
the connection's ``data_received``, see :mod:`loadgen.arrival`): it splits SSE lines
itself, so a long context never hits aiohttp's per-line limit (the 64 KB default broke
vLLM's own benchmark at 50k tokens), scans each byte once (a long line costs linear
time) and fails a line longer than its limit as a protocol error.

Values no engine can truly report (a negative or 10**40 token count, a NaN speed) fail
their request as a protocol error too, rather than poisoning the run's figures or the
store.

Timing is kept in ``perf_counter`` seconds in a mutable :class:`StreamState` that the
caller owns: when a run's deadline cancels a request, the caller still has everything
measured so far and can record it as *incomplete*.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Mapping
from typing import Any, cast

from runs.records import ErrorKind

_DECODER = json.JSONDecoder()


def _json_loads(payload: bytes | bytearray) -> Any:
    """One SSE payload as JSON: what ``json.loads`` does for bytes without its encoding
    sniffing and trailing-space pass (the payload is stripped UTF-8), a third of its cost."""
    text = payload.decode()
    obj, end = _DECODER.raw_decode(text)
    if end != len(text):
        raise ValueError(f"extra data after the JSON value at character {end}")
    return obj


try:  # orjson parses chunks ~3x faster; optional.
    import orjson

    loads: Callable[[bytes | bytearray], Any] = orjson.loads
except ImportError:  # pragma: no cover - depends on the environment
    loads = _json_loads

MAX_COUNT = 2**63 - 1
"""The largest token count accepted (SQLite's INTEGER); a larger one cannot be true."""
ERROR_BODY_PREVIEW_BYTES = 2048


class ProtocolError(Exception):
    """The engine sent what the protocol cannot carry: garbage, an impossible value, an
    oversize line."""


class EngineError(Exception):
    """A 2xx answer that is the engine's error (an error event, llama.cpp's ``error:`` line,
    a JSON error body)."""


class StreamState:
    """What one request measured so far (perf_counter seconds)."""

    __slots__ = (
        "chunk_perf",
        "done",
        "error_kind",
        "error_message",
        "events",
        "finish_reason",
        "http_status",
        "preview",
        "sent_perf",
        "server_decode_tok_s",
        "usage_completion_tokens",
        "usage_prompt_tokens",
    )

    def __init__(self) -> None:
        self.sent_perf: float | None = None
        self.chunk_perf: list[float] = []
        """Arrival time of every content chunk (role-only / usage chunks excluded)."""
        self.done = False
        self.events = 0
        """SSE data events read (any, content or not)."""
        self.preview = bytearray()
        """The answer's first bytes: what it was when it held no event."""
        self.finish_reason: str | None = None
        self.usage_prompt_tokens: int | None = None
        self.usage_completion_tokens: int | None = None
        self.server_decode_tok_s: float | None = None
        self.http_status: int | None = None
        self.error_kind: ErrorKind | None = None
        self.error_message: str | None = None

    def fail(self, kind: ErrorKind, message: str) -> None:
        self.error_kind = kind
        self.error_message = message[:500]


def _has_content(choice: Mapping[str, Any]) -> bool:
    delta = choice.get("delta")
    if isinstance(delta, dict):
        # Reasoning and tool-call deltas are tokens too; a role-only delta is not.
        return bool(
            delta.get("content")
            or delta.get("reasoning_content")
            or delta.get("reasoning")
            or delta.get("tool_calls")
        )
    return bool(choice.get("text"))


def _count(usage: Mapping[str, Any], name: str) -> int | None:
    """A usage token count: absent / null is None; a value that cannot be a count is
    a protocol error (``bool`` is an ``int`` in Python, but not a count)."""
    value = usage.get(name)
    if value is None:
        return None
    if type(value) is not int or not 0 <= value <= MAX_COUNT:
        raise ProtocolError(f"usage.{name} = {value!r:.60} is not a possible token count")
    return value


def _speed(timings: Mapping[str, Any]) -> float | None:
    value = timings.get("predicted_per_second")
    if value is None:
        return None
    # Compared, not converted first: NaN, inf and a 400-digit int all fail here.
    if type(value) not in (int, float) or not 0 <= value <= sys.float_info.max:
        raise ProtocolError(f"timings.predicted_per_second = {value!r:.60} is not a speed")
    return float(value)


def _take_event(state: StreamState, payload: bytes | bytearray, now: float) -> None:
    if payload == b"[DONE]":
        state.done = True
        return
    try:
        obj = loads(payload)
    except ValueError as exc:
        raise ProtocolError(f"malformed SSE JSON: {exc}; data={payload[:120]!r}") from None
    if not isinstance(obj, dict):
        raise ProtocolError(f"SSE data is not an object: {payload[:120]!r}")
    state.events += 1
    if obj.get("error") is not None:
        raise EngineError(f"error event in stream: {str(obj['error'])[:300]}")
    choices = obj.get("choices")
    if choices and isinstance(choices, list) and isinstance(choices[0], dict):
        choice = choices[0]
        if _has_content(choice):
            state.chunk_perf.append(now)
        if choice.get("finish_reason"):
            state.finish_reason = str(choice["finish_reason"])
    usage = obj.get("usage")
    if isinstance(usage, dict):
        state.usage_prompt_tokens = _count(usage, "prompt_tokens")
        state.usage_completion_tokens = _count(usage, "completion_tokens")
    timings = obj.get("timings")  # llama.cpp's own per-request timing
    if isinstance(timings, dict):
        speed = _speed(timings)
        if speed is not None:
            state.server_decode_tok_s = speed


class SseSink:
    """Splits a body into SSE lines and takes each event into ``state`` at once."""

    __slots__ = ("_max_line_bytes", "_partial", "_state")

    def __init__(self, state: StreamState, max_line_bytes: int) -> None:
        self._state = state
        self._max_line_bytes = max_line_bytes
        self._partial = bytearray()
        """The current line's bytes from earlier feeds (copied once more when it ends)."""

    def feed(self, data: bytes, arrived_at: float) -> None:
        """Take the events whose lines end in ``data``, which reached Python at
        ``arrived_at``; raises :class:`ProtocolError` / :class:`EngineError`."""
        state = self._state
        if len(state.preview) < ERROR_BODY_PREVIEW_BYTES:
            state.preview += data[: ERROR_BODY_PREVIEW_BYTES - len(state.preview)]
        # One pass in C; a list of both kinds, as the first line may be joined to ``partial``.
        lines = cast("list[bytes | bytearray]", data.split(b"\n"))
        tail = lines.pop()  # an unfinished line
        partial = self._partial
        if lines and partial:
            partial += lines[0]
            lines[0] = partial
            partial = self._partial = bytearray()
        max_line = self._max_line_bytes
        for line in lines:
            if not line:
                continue  # the blank line that ends an event
            if len(line) > max_line:
                raise ProtocolError(_too_long(max_line))
            if line.startswith(b"data:"):
                _take_event(state, line[5:].strip(), arrived_at)
            elif line.startswith(b"error:"):  # llama.cpp's error in a stream
                raise EngineError(f"error in stream: {bytes(line[6:]).strip()[:300]!r}")
        if tail:
            if len(partial) + len(tail) > max_line:
                raise ProtocolError(_too_long(max_line))
            partial += tail

    def finish(self, ended_at: float) -> None:
        """The body ended: its last event may lack the trailing newline."""
        if self._partial.startswith(b"data:"):
            _take_event(self._state, self._partial[5:].strip(), ended_at)


def _too_long(max_line_bytes: int) -> str:
    return (
        f"an SSE line is longer than {max_line_bytes:,} bytes (ClientLimits.max_line_bytes): "
        "the engine's stream is broken; the connection was closed"
    )
