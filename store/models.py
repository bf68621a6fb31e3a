"""Values the store hands out, and the row <-> record conversions.

The load generator's ``RequestRecord`` / ``LevelSummary`` are stored as they
are and read back equal (telemetry rows derive from their declarations in
``store.samples``).
"""

from __future__ import annotations

import dataclasses
import json
import struct
import sys
from array import array
from dataclasses import asdict, dataclass
from typing import Any

from engines.catalog.options import options_text
from runs.records import TOKEN_FIELDS, ErrorKind, LevelSummary, Percentiles, RequestRecord

_PERCENTILE_FIELDS = (
    "ttft_s",
    "tpot_s",
    "itl_s",
    "e2e_s",
    "ttft_from_schedule_s",
    *TOKEN_FIELDS,
)


@dataclass(frozen=True, slots=True)
class RunInfo:
    run_id: str
    name: str | None
    engine_kind: str | None
    node: str | None
    deployment_id: str | None
    profile: dict[str, Any]
    workload: dict[str, Any]
    software_versions: dict[str, Any]
    simulated: bool
    status: str
    created_at: float
    finished_at: float | None
    level_count: int = 0
    request_count: int = 0
    """Requests stored for the run (warm-up, failed and cut ones included)."""
    status_reason: str | None = None
    """Why the run ended as it did (a failed or interrupted run says), in words."""

    @property
    def engine_options(self) -> dict[str, Any]:
        """The start options its engine ran with (``RunSetup.engine``), set ones only."""
        engine = self.profile.get("engine")
        options = engine.get("options") if isinstance(engine, dict) else None
        return options if isinstance(options, dict) else {}

    @property
    def label(self) -> str:
        """Its name and its engine's start options, e.g. "vllm a1 (prefix caching off)"."""
        name = self.name or f"{self.engine_kind or 'run'} {self.run_id}"
        options = options_text(self.engine_options)
        return f"{name} ({options})" if options else name


@dataclass(frozen=True, slots=True)
class LevelRow:
    run_id: str
    summary: LevelSummary


@dataclass(frozen=True, slots=True)
class ComparisonRow:
    """One run at one load level, with the metrics a comparison shows."""

    run_id: str
    label: str
    engine_kind: str | None
    node: str | None
    simulated: bool
    level_index: int
    concurrency: int | None
    request_rate: float | None
    started_at: float
    ended_at: float
    output_tok_s: float
    request_s: float
    ttft_p50_s: float | None
    ttft_p99_s: float | None
    tpot_p50_s: float | None
    failure_rate: float
    total_output_tokens: int
    mean_gpu_util_pct: float | None
    mean_power_w: float | None
    energy_j: float | None
    energy_source: str | None
    """"loadgen" (the level's own figure), "telemetry" (stored GPU samples) or None."""
    failures_by_kind: dict[str, int] = dataclasses.field(default_factory=dict)
    """The level's failed requests by kind (rate-limited apart from other HTTP errors)."""
    peak_gpu_mem_bytes: int | None = None
    """GPU memory in use at its highest over the level's window, each of the engine's GPUs'
    peak summed (stored telemetry); None where none was stored."""
    kv_cache_peak: float | None = None
    """The engine's KV-cache usage (0-1) at its highest over the window; None where the
    engine reported none or no telemetry was stored."""

    @property
    def j_per_token(self) -> float | None:
        if self.energy_j is None or self.total_output_tokens == 0:
            return None
        return self.energy_j / self.total_output_tokens

    @property
    def tok_per_j(self) -> float | None:
        if not self.energy_j or self.total_output_tokens == 0:
            return None
        return self.total_output_tokens / self.energy_j

    @property
    def level_key(self) -> tuple[int | None, float | None]:
        return (self.concurrency, self.request_rate)


@dataclass(frozen=True, slots=True)
class Comparison:
    runs: tuple[RunInfo, ...]
    rows: tuple[ComparisonRow, ...]
    warnings: tuple[str, ...] = ()
    """That the runs' workloads differ: in what they asked (``store.labels.differences``)
    or by more than 5 % in what the engines counted (``runs.records.workload_gaps``)."""
    labels: dict[str, str] = dataclasses.field(default_factory=dict)
    """Each run's label, unique within this comparison (``store.labels``)."""

    def label(self, run: RunInfo) -> str:
        return self.labels.get(run.run_id) or run.label


@dataclass(frozen=True, slots=True)
class Regression:
    """A metric that got worse from ``base_run`` to ``new_run`` at one level."""

    concurrency: int | None
    request_rate: float | None
    metric: str
    base: float
    new: float
    change: float
    """Relative change (new / base - 1); absolute difference for failure_rate."""


# --- fields the contracts gained beyond the stored columns ---------------


def _extra_spec(cls: type, columns: set[str]) -> tuple[tuple[str, Any], ...]:
    spec = []
    for f in dataclasses.fields(cls):
        if f.name in columns:
            continue
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            default = dataclasses.MISSING  # always stored
        spec.append((f.name, default))
    return tuple(spec)


def _extras_json(obj: Any, spec: tuple[tuple[str, Any], ...]) -> str | None:
    values = {}
    for name, default in spec:
        value = getattr(obj, name)
        if value != default:
            values[name] = value
    return json.dumps(values, default=str) if values else None


def _extras_from(blob: str | None, spec: tuple[tuple[str, Any], ...]) -> dict[str, Any]:
    if not blob:
        return {}
    known = {name for name, _ in spec}
    # A field a later contract removed is dropped; JSON lists were tuples.
    return {
        k: tuple(v) if isinstance(v, list) else v for k, v in json.loads(blob).items() if k in known
    }


# --- requests -------------------------------------------------------------

REQUEST_COLUMNS = (
    "run_id, level_index, request_index, scheduled_at, sent_at, first_token_at, end_at, "
    "prompt_tokens, output_tokens, usage_completion_tokens, counted_output_tokens, chunk_count, "
    "error_kind, http_status, error_message, incomplete, chunks_blob, extra_json"
)
INSERT_REQUEST = (
    f"INSERT OR REPLACE INTO requests ({REQUEST_COLUMNS}) VALUES ({', '.join('?' * 18)})"
)
_REQUEST_EXTRAS = _extra_spec(
    RequestRecord,
    {c.strip() for c in REQUEST_COLUMNS.split(",")} | {"itl_s", "tokens_per_chunk"},
)
_LITTLE = sys.byteorder == "little"


_CHUNKS_HEADER = struct.Struct("<cI")  # tokens typecode, number of ITL gaps


def pack_chunks(itl_s: tuple[float, ...], tokens_per_chunk: tuple[int, ...]) -> bytes | None:
    """ITL gaps (float64, exact) and tokens per chunk (one byte each when they
    fit, as they nearly always do) in one little-endian blob: the bulk of a
    request row, kept small and quick to build because it bounds the insert rate."""
    if not itl_s and not tokens_per_chunk:
        return None
    gaps = struct.pack(f"<{len(itl_s)}d", *itl_s)
    try:
        return _CHUNKS_HEADER.pack(b"B", len(itl_s)) + gaps + bytes(tokens_per_chunk)
    except ValueError:  # a chunk of 256+ tokens (or a bogus negative count)
        tokens = array("q", tokens_per_chunk)
        if not _LITTLE:
            tokens.byteswap()
        return _CHUNKS_HEADER.pack(b"q", len(itl_s)) + gaps + tokens.tobytes()


def unpack_chunks(blob: bytes | None) -> tuple[tuple[float, ...], tuple[int, ...]]:
    if not blob:
        return (), ()
    code, n = _CHUNKS_HEADER.unpack_from(blob)
    start = _CHUNKS_HEADER.size
    gaps = struct.unpack_from(f"<{n}d", blob, start)
    rest = blob[start + 8 * n :]
    if code == b"B":
        return gaps, tuple(rest)
    tokens = array("q")
    tokens.frombytes(rest)
    if not _LITTLE:
        tokens.byteswap()
    return gaps, tuple(tokens)


def request_to_row(r: RequestRecord) -> tuple[Any, ...]:
    return (
        r.run_id,
        r.level_index,
        r.request_index,
        r.scheduled_at,
        r.sent_at,
        r.first_token_at,
        r.end_at,
        r.prompt_tokens,
        r.output_tokens,
        r.usage_completion_tokens,
        r.counted_output_tokens,
        r.chunk_count,
        None if r.error_kind is None else str(r.error_kind),
        r.http_status,
        r.error_message,
        int(r.incomplete),
        pack_chunks(r.itl_s, r.tokens_per_chunk),
        _extras_json(r, _REQUEST_EXTRAS) if _REQUEST_EXTRAS else None,
    )


def row_to_request(row: tuple[Any, ...]) -> RequestRecord:
    itl_s, tokens_per_chunk = unpack_chunks(row[16])
    return RequestRecord(
        run_id=row[0],
        level_index=row[1],
        request_index=row[2],
        scheduled_at=row[3],
        sent_at=row[4],
        first_token_at=row[5],
        end_at=row[6],
        prompt_tokens=row[7],
        output_tokens=row[8],
        usage_completion_tokens=row[9],
        counted_output_tokens=row[10],
        chunk_count=row[11],
        error_kind=None if row[12] is None else ErrorKind(row[12]),
        http_status=row[13],
        error_message=row[14],
        incomplete=bool(row[15]),
        itl_s=itl_s,
        tokens_per_chunk=tokens_per_chunk,
        **_extras_from(row[17], _REQUEST_EXTRAS),
    )


def request_to_json(r: RequestRecord) -> dict[str, Any]:
    """A request as JSONL export writes it: the record plus derived times."""
    out = asdict(r)
    out["error_kind"] = None if r.error_kind is None else str(r.error_kind)
    out["itl_s"] = list(r.itl_s)
    out["tokens_per_chunk"] = list(r.tokens_per_chunk)
    out["ttft_s"] = r.ttft_s
    out["tpot_s"] = r.tpot_s
    out["e2e_s"] = r.e2e_s
    out["usage_minus_counted"] = (
        None
        if r.usage_completion_tokens is None
        else r.usage_completion_tokens - r.counted_output_tokens
    )
    return out


# --- levels ---------------------------------------------------------------

LEVEL_COLUMNS = (
    "run_id, level_index, concurrency, request_rate, started_at, ended_at, completed, failed, "
    "incomplete, output_tok_s, total_tok_s, request_s, achieved_rate, goodput_req_s, "
    "ttft_p50_s, ttft_p99_s, tpot_p50_s, percentiles_json, failures_json, total_output_tokens, "
    "total_prompt_tokens, usage_mismatches, energy_j, mean_gpu_util_pct, mean_power_w, extra_json"
)
INSERT_LEVEL = f"INSERT OR REPLACE INTO levels ({LEVEL_COLUMNS}) VALUES ({', '.join('?' * 26)})"
_LEVEL_EXTRAS = _extra_spec(
    LevelSummary,
    {c.strip() for c in LEVEL_COLUMNS.split(",")} | set(_PERCENTILE_FIELDS) | {"failures_by_kind"},
)


def level_to_row(run_id: str, s: LevelSummary) -> tuple[Any, ...]:
    percentiles = {name: asdict(getattr(s, name)) for name in _PERCENTILE_FIELDS}
    return (
        run_id,
        s.level_index,
        s.concurrency,
        s.request_rate,
        s.started_at,
        s.ended_at,
        s.completed,
        s.failed,
        s.incomplete,
        s.output_tok_s,
        s.total_tok_s,
        s.request_s,
        s.achieved_rate,
        s.goodput_req_s,
        s.ttft_s.p50,
        s.ttft_s.p99,
        s.tpot_s.p50,
        json.dumps(percentiles),
        json.dumps(s.failures_by_kind),
        s.total_output_tokens,
        s.total_prompt_tokens,
        s.usage_mismatches,
        s.energy_j,
        s.mean_gpu_util_pct,
        s.mean_power_w,
        _extras_json(s, _LEVEL_EXTRAS),
    )


def row_to_level(row: tuple[Any, ...]) -> LevelRow:
    pct = json.loads(row[17])
    tokens: dict[str, Any] = {name: Percentiles(**pct.get(name, {})) for name in TOKEN_FIELDS}
    summary = LevelSummary(
        level_index=row[1],
        concurrency=row[2],
        request_rate=row[3],
        started_at=row[4],
        ended_at=row[5],
        completed=row[6],
        failed=row[7],
        incomplete=row[8],
        output_tok_s=row[9],
        total_tok_s=row[10],
        request_s=row[11],
        achieved_rate=row[12],
        goodput_req_s=row[13],
        ttft_s=Percentiles(**pct["ttft_s"]),
        tpot_s=Percentiles(**pct["tpot_s"]),
        itl_s=Percentiles(**pct["itl_s"]),
        e2e_s=Percentiles(**pct["e2e_s"]),
        ttft_from_schedule_s=Percentiles(**pct["ttft_from_schedule_s"]),
        failures_by_kind=json.loads(row[18]),
        total_output_tokens=row[19],
        total_prompt_tokens=row[20],
        usage_mismatches=row[21],
        energy_j=row[22],
        mean_gpu_util_pct=row[23],
        mean_power_w=row[24],
        **tokens,  # newer rows
        **_extras_from(row[25], _LEVEL_EXTRAS),
    )
    return LevelRow(run_id=row[0], summary=summary)
