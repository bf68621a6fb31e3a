"""The one rule for when a percentile says something: p99 of 4 requests is not a p99."""

from __future__ import annotations

from runs.records import percentile_sufficient, samples_needed


def test_a_quantile_needs_one_over_its_tail_in_samples() -> None:
    assert [samples_needed(q) for q in (0.5, 0.9, 0.95, 0.99, 0.999)] == [2, 10, 20, 100, 1000]
    assert not percentile_sufficient(0.99, 4)
    assert not percentile_sufficient(0.99, 99)
    assert percentile_sufficient(0.99, 100)
    assert percentile_sufficient(0.5, 2) and not percentile_sufficient(0.5, 1)
