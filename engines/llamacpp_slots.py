"""llama.cpp's ``GET /slots``: the live view its ``/metrics`` cannot give.

llama-server's token counters move only when a request ends, and builds since
May 2025 export no KV-cache gauge.  ``/slots`` (enabled by ``--slots``) lists
each slot with ``is_processing`` and, while a task runs, ``n_prompt_tokens``
and ``next_token[0].n_decoded`` — enough for running requests, generation
progress of open streams, and an estimate of KV use from slot contexts.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace

from engines.dialects.prom import MetricsParseError, as_float, decode_payload
from engines.sample import EngineSample


@dataclass(frozen=True, slots=True)
class SlotState:
    slot_id: int
    n_ctx: int
    is_processing: bool
    n_prompt_tokens: int | None = None
    n_decoded: int | None = None
    n_past: int | None = None
    """Context fill as older builds report it (prompt and decoded together)."""

    @property
    def tokens_in_context(self) -> int:
        """Cells this slot's running task holds: prompt + decoded, at most n_ctx."""
        if not self.is_processing:
            return 0
        if self.n_past is not None:
            used = self.n_past
        else:
            used = (self.n_prompt_tokens or 0) + (self.n_decoded or 0)
        return min(used, self.n_ctx) if self.n_ctx > 0 else used


@dataclass(frozen=True, slots=True)
class SlotsSummary:
    slots: tuple[SlotState, ...]

    @property
    def n_slots(self) -> int:
        return len(self.slots)

    @property
    def processing(self) -> int:
        return sum(1 for s in self.slots if s.is_processing)

    @property
    def decoded_in_flight(self) -> int:
        """Σ n_decoded over slots still processing: grows while streams are open."""
        return sum(s.n_decoded or 0 for s in self.slots if s.is_processing)

    @property
    def ctx_total(self) -> int:
        return sum(s.n_ctx for s in self.slots)

    @property
    def kv_usage_estimate(self) -> float | None:
        """Fraction of all slot contexts held by running tasks (an estimate:
        the server does not say how many cells it really keeps)."""
        total = self.ctx_total
        if total <= 0:
            return None
        return min(sum(s.tokens_in_context for s in self.slots) / total, 1.0)


_INT32_MAX = 2**31 - 1
"""llama-server keeps slot ids, contexts and token counts in 32-bit ints."""


def _int_field(entry: Mapping[str, object], key: str) -> int | None:
    """A count the server reports, or None when absent; a value no llama-server
    can hold (negative, past int32) is refused rather than summed into the estimate."""
    try:
        value = as_float(entry.get(key))
    except MetricsParseError as exc:
        raise MetricsParseError(f"llama.cpp /slots: {key}: {exc}") from None
    if value is None:
        return None
    if not 0 <= value <= _INT32_MAX:
        raise MetricsParseError(f"llama.cpp /slots: {key} = {value:g} is outside 0..{_INT32_MAX}")
    return int(value)


def _slot(entry: object, index: int) -> SlotState:
    if not isinstance(entry, Mapping):
        raise MetricsParseError(f"llama.cpp /slots: entry {index} is {type(entry).__name__}")
    n_ctx = _int_field(entry, "n_ctx")
    processing = entry.get("is_processing")
    if n_ctx is None or not isinstance(processing, bool):
        raise MetricsParseError(
            f"llama.cpp /slots: entry {index} lacks n_ctx / is_processing (keys: {sorted(entry)})"
        )
    decoded: int | None = None
    next_token = entry.get("next_token")
    if isinstance(next_token, list) and next_token and isinstance(next_token[0], Mapping):
        decoded = _int_field(next_token[0], "n_decoded")
    elif isinstance(next_token, Mapping):  # builds before multi-token prediction
        decoded = _int_field(next_token, "n_decoded")
    slot_id = _int_field(entry, "id")
    return SlotState(
        slot_id=index if slot_id is None else slot_id,
        n_ctx=n_ctx,
        is_processing=processing,
        n_prompt_tokens=_int_field(entry, "n_prompt_tokens"),
        n_decoded=decoded,
        n_past=_int_field(entry, "n_past"),
    )


def parse_llamacpp_slots(payload: str | bytes) -> SlotsSummary:
    """Parse ``/slots``; raise MetricsParseError on anything but a list of slots."""
    text = decode_payload(payload, what="llama.cpp /slots")
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise MetricsParseError(f"llama.cpp /slots: not JSON ({exc})") from exc
    if isinstance(data, Mapping) and "error" in data:
        # 501 body when the server runs without --slots
        raise MetricsParseError(f"llama.cpp /slots: server answered an error: {data['error']}")
    if not isinstance(data, list):
        raise MetricsParseError("llama.cpp /slots: expected a JSON list of slots")
    return SlotsSummary(tuple(_slot(entry, i) for i, entry in enumerate(data)))


def merge_llamacpp(metrics_sample: EngineSample, slots: SlotsSummary) -> EngineSample:
    """Combine a ``/metrics`` sample with ``/slots``.

    Running requests and in-flight generation come from the slots (live);
    waiting stays ``llamacpp:requests_deferred``.  KV use is estimated from slot
    contexts only where the server exports no gauge of its own.
    """
    kv, estimate = metrics_sample.kv_cache_usage, metrics_sample.kv_cache_usage_is_estimate
    if kv is None:
        kv, estimate = slots.kv_usage_estimate, slots.kv_usage_estimate is not None
    raw = dict(metrics_sample.raw)
    raw.update(
        {
            "slots.n_slots": float(slots.n_slots),
            "slots.processing": float(slots.processing),
            "slots.n_decoded_in_flight": float(slots.decoded_in_flight),
            "slots.n_ctx_total": float(slots.ctx_total),
        }
    )
    return replace(
        metrics_sample,
        requests_running=float(slots.processing),
        generation_tokens_in_flight=float(slots.decoded_in_flight),
        kv_cache_usage=kv,
        kv_cache_usage_is_estimate=estimate,
        raw=raw,
    )
