"""What one load-test request and one load level produce.

Shared by the load generator (which fills them), the store (which keeps them)
and the TUI (which shows them).  Times are Unix epoch seconds (float) taken
from one wall-clock base plus ``perf_counter`` deltas, so they are comparable
with telemetry frames and exact to the microsecond within a run.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum


class ErrorKind(StrEnum):
    CONNECT = "connect"  # no byte of the request reached the server
    HTTP_STATUS = "http_status"  # non-2xx answer other than 429
    RATE_LIMITED = "rate_limited"  # 429: the engine refused for load (TGI's request limit)
    TIMEOUT = "timeout"
    BROKEN_STREAM = "broken_stream"  # the stream ended without [DONE] / finish
    NO_CONTENT = "no_content"  # 2xx but no content chunk at all
    ENGINE_ERROR = "engine_error"  # 2xx, but the engine's answer is its error
    PROTOCOL = "protocol"  # garbage, impossible values (a negative count), an oversize line


@dataclass(frozen=True, slots=True)
class RequestRecord:
    run_id: str
    level_index: int
    request_index: int
    scheduled_at: float
    """When the load profile wanted the request sent (no coordinated omission)."""
    sent_at: float
    first_token_at: float | None
    end_at: float | None
    """Last content chunk (the E2E end) — None when no content arrived."""
    prompt_tokens: int | None
    """Prompt tokens: ``usage.prompt_tokens`` when the engine sent usage."""
    output_tokens: int
    """Output tokens used for throughput: usage when present, else counted."""
    usage_completion_tokens: int | None
    counted_output_tokens: int
    """Tokens re-counted from content chunks (one per chunk unless known)."""
    chunk_count: int
    itl_s: tuple[float, ...] = ()
    """Gaps between consecutive content chunks, seconds."""
    tokens_per_chunk: tuple[int, ...] = ()
    error_kind: ErrorKind | None = None
    http_status: int | None = None
    error_message: str | None = None
    incomplete: bool = False
    """Stream ended early (e.g. cut by the run's deadline) but is not a failure."""
    warmup: bool = False
    """Sent during the level's warm-up: kept in the sink, left out of the summary."""
    server_decode_tok_s: float | None = None
    """The engine's own decode speed for this request (llama.cpp ``timings``), when sent."""
    load_node: str | None = None
    """The node that sent it, in a run split over several load nodes (its times are on
    that node's clock); None when one load generator sent the whole run."""
    engine_node: str | None = None
    """The node whose engine answered it, in a run over every replica of a Swarm service
    (each replica is its node's engine, under the service's id); None when the run had
    one engine (the run's node)."""
    requested_prompt_tokens: int | None = None
    """Prompt tokens the workload asked the engine to count (with the chat template's
    tokens where they were measured); ``prompt_tokens`` is what it counted."""
    requested_output_tokens: int | None = None

    @property
    def ok(self) -> bool:
        return self.error_kind is None

    @property
    def ttft_s(self) -> float | None:
        return None if self.first_token_at is None else self.first_token_at - self.sent_at

    @property
    def e2e_s(self) -> float | None:
        return None if self.end_at is None else self.end_at - self.sent_at

    @property
    def tpot_s(self) -> float | None:
        if self.first_token_at is None or self.end_at is None or self.output_tokens < 2:
            return None
        return (self.end_at - self.first_token_at) / (self.output_tokens - 1)


@dataclass(frozen=True, slots=True)
class Percentiles:
    p50: float | None = None
    p90: float | None = None
    p95: float | None = None
    p99: float | None = None
    p999: float | None = None
    mean: float | None = None


def samples_needed(quantile: float) -> int:
    """The fewest values a ``quantile`` (0.99 for p99) says something from: 1 / (1 − q)
    (p50 2, p90 10, p99 100, p99.9 1000). From fewer, a p99 is the maximum or an
    interpolation toward it: shown, but marked as not a p99."""
    return math.ceil(round(1.0 / (1.0 - quantile), 6))


def percentile_sufficient(quantile: float, samples: int) -> bool:
    return samples >= samples_needed(quantile)


@dataclass(frozen=True, slots=True)
class LevelSummary:
    """One concurrency (or rate) step of a run, summarised over its steady window."""

    level_index: int
    concurrency: int | None
    request_rate: float | None
    """Offered rate, requests/s (None for closed-loop levels)."""
    started_at: float
    ended_at: float
    completed: int
    failed: int
    incomplete: int
    output_tok_s: float
    total_tok_s: float
    request_s: float
    achieved_rate: float
    goodput_req_s: float | None
    ttft_s: Percentiles
    tpot_s: Percentiles
    itl_s: Percentiles
    e2e_s: Percentiles
    ttft_from_schedule_s: Percentiles
    failures_by_kind: dict[str, int] = field(default_factory=dict)
    failure_samples: dict[str, str] = field(default_factory=dict)
    """One failed request's error message per kind (``engine_words``): what the engine
    itself said, so an operator sees why without opening the records."""
    total_output_tokens: int = 0
    total_prompt_tokens: int = 0
    usage_mismatches: int = 0
    energy_j: float | None = None
    """GPU energy over the level's window (energy-counter delta), when known."""
    input_requested: Percentiles = Percentiles()
    """Prompt tokens per finished request as asked (``RequestRecord.requested_prompt_tokens``)."""
    input_sent: Percentiles = Percentiles()
    """Prompt tokens per finished request as the engine counted them (``usage``)."""
    output_requested: Percentiles = Percentiles()
    output_sent: Percentiles = Percentiles()
    mean_gpu_util_pct: float | None = None
    mean_power_w: float | None = None

    @property
    def failure_rate(self) -> float:
        n = self.completed + self.failed
        return self.failed / n if n else 0.0

    @property
    def output_tok_per_j(self) -> float | None:
        if not self.energy_j or self.total_output_tokens == 0:
            return None
        return self.total_output_tokens / self.energy_j


DEVIATION_LIMIT = 0.05
"""Sent tokens further than this from the requested (relative) is a warning."""
TOKEN_FIELDS = ("input_requested", "input_sent", "output_requested", "output_sent")


def level_name(s: LevelSummary) -> str:
    """How a level is named in words: "c=4" or "2 req/s"."""
    return f"c={s.concurrency}" if s.request_rate is None else f"{s.request_rate:g} req/s"


def _deviation(requested: float | None, sent: float | None) -> float | None:
    if not requested or sent is None:
        return None
    return sent / requested - 1.0


def token_deviations(levels: Iterable[LevelSummary]) -> list[str]:
    """A warning per level whose mean engine-counted input or output tokens are more than
    5 % from what was requested: the workload measured is not the one asked for."""
    warnings = []
    for s in levels:
        for what, asked, sent in (
            ("input", s.input_requested.mean, s.input_sent.mean),
            ("output", s.output_requested.mean, s.output_sent.mean),
        ):
            off = _deviation(asked, sent)
            if off is None or abs(off) <= DEVIATION_LIMIT:
                continue
            assert asked is not None and sent is not None
            warnings.append(
                f"{level_name(s)}: the engine counted {sent:.0f} {what} tokens per request, "
                f"{asked:.0f} were requested ({off:+.0%})"
            )
    return warnings


def _per_request(levels: Sequence[LevelSummary], field_name: str) -> float | None:
    """Mean tokens per finished request over a run's levels (each level's mean by its
    finished requests)."""
    weighted = [
        (mean, s.completed)
        for s in levels
        if (mean := getattr(s, field_name).mean) is not None and s.completed
    ]
    total = sum(n for _, n in weighted)
    return sum(m * n for m, n in weighted) / total if total else None


def workload_gaps(runs: Mapping[str, Sequence[LevelSummary]]) -> list[str]:
    """A warning when compared runs sent workloads more than 5 % apart (engine-counted
    input or output tokens per request): their latencies measure different work."""
    warnings = []
    for what, field_name in (("input", "input_sent"), ("output", "output_sent")):
        sizes = {
            run: size
            for run, levels in runs.items()
            if (size := _per_request(levels, field_name)) is not None
        }
        if len(sizes) < 2:
            continue
        low, high = min(sizes.values()), max(sizes.values())
        if low > 0 and high / low - 1.0 > DEVIATION_LIMIT:
            each = ", ".join(f"{run} {size:.0f}" for run, size in sizes.items())
            warnings.append(
                f"the runs' workloads differ by {high / low - 1.0:.0%} in {what} tokens per "
                f"request by the engines' count ({each}): they measured different work"
            )
    return warnings


def tokens_text(s: LevelSummary) -> str:
    """Requested vs engine-counted tokens of a level: mean, p50 and p99 of each."""

    def three(p: Percentiles) -> str:
        values = (p.mean, p.p50, p.p99)
        return "n/a" if p.mean is None else "/".join(f"{v:.0f}" for v in values if v is not None)

    return (
        f"input requested {three(s.input_requested)}, engine {three(s.input_sent)}; "
        f"output requested {three(s.output_requested)}, engine {three(s.output_sent)} "
        "(mean/p50/p99)"
    )


_KIND_LABELS: dict[str, str] = {ErrorKind.RATE_LIMITED: "rate-limited (429)"}


def kind_label(kind: str) -> str:
    """How a failure kind reads to an operator ("rate-limited (429)"; others by name)."""
    return _KIND_LABELS.get(kind, kind)


def failures_text(counts: Mapping[str, int]) -> str:
    """Failure counts by kind, most common first ("rate-limited (429) 6, connect 2")."""
    return ", ".join(f"{kind_label(kind)} {n}" for kind, n in Counter(counts).most_common())


def failures_sampled(counts: Mapping[str, int], samples: Mapping[str, str]) -> list[str]:
    """One line per failure kind, most common first, with the engine's own words
    ("http_status 32: HTTP 400 exceed_context_size_error: request (2421 tokens) ...")."""
    return [
        f"{kind_label(kind)} {n}" + (f": {samples[kind]}" if kind in samples else "")
        for kind, n in Counter(counts).most_common()
    ]


def engine_words(message: str) -> str:
    """An error message made readable: an engine's JSON error body (OpenAI, llama.cpp,
    vLLM and TGI shapes) reduced to its type and message ("HTTP 400
    exceed_context_size_error: request (2421 tokens) exceeds ..."); other text as is."""
    status, sep, body = message.partition(": ")
    if not sep or not body.lstrip().startswith("{"):
        return message
    try:
        data = json.loads(body)
    except ValueError:
        return message  # a cut preview: the raw text says more than nothing
    error = data.get("error") if isinstance(data, dict) else None
    inner = error if isinstance(error, dict) else data
    if not isinstance(inner, dict):
        return message
    text = inner.get("message") or inner.get("detail") or error
    kind = inner.get("type") or inner.get("error_type")
    if not isinstance(text, str) or not text:
        return message
    return f"{status} {kind}: {text}" if isinstance(kind, str) and kind else f"{status}: {text}"


def failures_field(counts: Mapping[str, int]) -> str:
    """Failure counts by kind as one CSV field ("connect=2;rate_limited=6")."""
    return ";".join(f"{kind}={n}" for kind, n in sorted(counts.items()))


def failures_by_kind(levels: Iterable[LevelSummary]) -> str:
    """The levels' failures by kind, most common first ("http_status 6, connect 2"): how
    a run's status line and the bench's exit message say what failed."""
    kinds: Counter[str] = Counter()
    for s in levels:
        kinds.update(s.failures_by_kind)
    return failures_text(kinds)


def first_failure_sample(levels: Iterable[LevelSummary]) -> str | None:
    """The engine's words for the levels' most common failure kind, if any were kept."""
    kinds: Counter[str] = Counter()
    samples: dict[str, str] = {}
    for s in levels:
        kinds.update(s.failures_by_kind)
        for kind, text in s.failure_samples.items():
            samples.setdefault(kind, text)
    return next((samples[k] for k, _ in kinds.most_common() if k in samples), None)
