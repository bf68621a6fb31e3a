"""Level summaries follow docs/design.md's metric definitions, on hand-built records."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from loadgen.profiles import ClosedLoop, OpenLoop, Slo
from loadgen.stats import StridedSample, percentiles, quantile, summarise_level
from runs.records import ErrorKind, RequestRecord

T0 = 1_800_000_000.0


def rec(
    i: int, sent: float, ttft: float | None, n_out: int, gap: float, **kw: object
) -> RequestRecord:
    first = None if ttft is None else T0 + sent + ttft
    end = None if first is None else first + gap * (n_out - 1)
    values: dict[str, object] = {
        "run_id": "r",
        "level_index": 0,
        "request_index": i,
        "scheduled_at": T0 + sent,
        "sent_at": T0 + sent,
        "first_token_at": first,
        "end_at": end,
        "prompt_tokens": 10,
        "output_tokens": n_out,
        "usage_completion_tokens": n_out,
        "counted_output_tokens": n_out,
        "chunk_count": n_out,
        "itl_s": (gap,) * (n_out - 1),
    }
    values.update(kw)
    return RequestRecord(**values)  # type: ignore[arg-type]


@given(st.lists(st.floats(-1e6, 1e6), min_size=1, max_size=300))
def test_percentiles_are_numpy_linear_interpolation(values: list[float]) -> None:
    p = percentiles(values)
    expected = np.percentile(values, [50, 90, 95, 99, 99.9])
    got = [p.p50, p.p90, p.p95, p.p99, p.p999]
    assert got == pytest.approx(list(expected), rel=1e-9, abs=1e-6)


def test_quantile_of_nothing_is_an_error_and_percentiles_of_nothing_are_none() -> None:
    with pytest.raises(ValueError):
        quantile([], 0.5)
    assert percentiles([]).p50 is None


def test_summary_definitions() -> None:
    records = [
        rec(0, 0.0, 0.1, 11, 0.01, warmup=True),  # warm-up: left out
        rec(1, 1.0, 0.2, 11, 0.02),  # e2e 0.4, tpot 0.02
        rec(2, 1.5, 0.3, 21, 0.01),  # e2e 0.5, tpot 0.01
        rec(3, 2.0, 0.1, 1, 0.0),  # one token: no TPOT
        rec(4, 2.1, None, 0, 0.0, error_kind=ErrorKind.HTTP_STATUS, http_status=500),
        rec(5, 2.2, None, 0, 0.0, error_kind=ErrorKind.TIMEOUT),
        rec(6, 2.3, 0.1, 3, 0.05, incomplete=True),  # cut at the end: neither
        rec(7, 2.4, 0.2, 5, 0.01, usage_completion_tokens=6, output_tokens=6),
    ]
    s = summarise_level(0, ClosedLoop(4), records, Slo(ttft_s=0.25, tpot_s=0.015))
    assert (s.completed, s.failed, s.incomplete) == (4, 2, 1)
    assert s.failures_by_kind == {"http_status": 1, "timeout": 1}
    assert s.failure_rate == pytest.approx(2 / 6)
    # Window: first measured send (1.0) to last content chunk (rec 7: 2.4+0.2+0.04).
    window = (2.4 + 0.2 + 0.04) - 1.0
    assert s.started_at == pytest.approx(T0 + 1.0) and s.ended_at == pytest.approx(T0 + 2.64)
    assert s.total_output_tokens == 11 + 21 + 1 + 6
    assert s.output_tok_s == pytest.approx(39 / window)
    assert s.total_tok_s == pytest.approx((39 + 40) / window)
    assert s.request_s == pytest.approx(4 / window)
    assert s.ttft_s.p50 == pytest.approx(0.2)
    assert s.tpot_s.mean == pytest.approx((0.02 + 0.01 + 0.04 / 5) / 3)
    assert s.e2e_s.p50 == pytest.approx(np.percentile([0.4, 0.5, 0.1, 0.24], 50))
    # Goodput: rec 2 (ttft 0.3 > 0.25) and rec 1 (tpot 0.02 > 0.015) miss; 3 and 7 meet.
    assert s.goodput_req_s == pytest.approx(2 / window)
    assert s.usage_mismatches == 1  # rec 7: usage 6, counted 5
    assert s.concurrency == 4 and s.request_rate is None
    # Achieved rate: 7 measured sends from 1.0 to 2.4.
    assert s.achieved_rate == pytest.approx(6 / 1.4)


def test_itl_is_pooled_over_all_gaps_of_all_requests() -> None:
    records = [rec(0, 0.0, 0.1, 3, 0.01), rec(1, 0.0, 0.1, 5, 0.03)]
    s = summarise_level(0, ClosedLoop(2), records, None)
    assert s.itl_s.mean == pytest.approx((2 * 0.01 + 4 * 0.03) / 6)
    assert s.goodput_req_s is None


def test_latency_from_schedule_shows_coordinated_omission() -> None:
    late = rec(0, 1.0, 0.1, 2, 0.01, scheduled_at=T0 + 0.5)  # sent 0.5 s late
    s = summarise_level(0, OpenLoop(2.0), [late], None)
    assert s.ttft_s.p50 == pytest.approx(0.1)
    assert s.ttft_from_schedule_s.p50 == pytest.approx(0.6)
    assert s.request_rate == 2.0


def test_a_level_with_only_failures_summarises_without_error() -> None:
    records = [rec(i, 0.1 * i, None, 0, 0.0, error_kind=ErrorKind.CONNECT) for i in range(3)]
    s = summarise_level(0, ClosedLoop(1), records, Slo(ttft_s=1.0))
    assert (s.completed, s.failed) == (0, 3)
    assert s.output_tok_s == 0.0 and s.ttft_s.p50 is None and s.goodput_req_s == 0.0


def test_the_live_itl_sample_is_exact_while_small_then_bounded_and_spread() -> None:
    small = StridedSample(limit=100)
    for start in range(0, 150, 30):
        small.add([float(v) for v in range(start, start + 30)])
    assert small.values == [float(v) for v in range(150)]  # under 2 × limit: every gap

    big = StridedSample(limit=100)
    for start in range(0, 10_000, 7):  # requests of 7 gaps each
        big.add([float(v) for v in range(start, min(start + 7, 10_000))])
    assert len(big.values) < 200
    # Every stride-th gap of the whole level: spread evenly from its first to its last.
    assert big.values == [float(v) for v in range(0, 10_000, big.stride)]
    assert percentiles(big.values).p50 == pytest.approx(5_000, rel=0.02)
