"""llama.cpp's /slots gives what its /metrics cannot: live progress and a KV estimate."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from engines.catalog import MetricsParseError, get_spec, merge_llamacpp, parse_llamacpp_slots

FIX = Path(__file__).resolve().parents[1] / "fixtures"


def test_busy_slots_from_a_real_server() -> None:
    slots = parse_llamacpp_slots((FIX / "llamacpp-live" / "slots-busy.json").read_bytes())
    assert (slots.n_slots, slots.processing, slots.ctx_total) == (4, 4, 4 * 2048)
    assert slots.decoded_in_flight == 4 * 209
    # prompt + decoded per running slot over all slot contexts
    assert slots.kv_usage_estimate == pytest.approx((292 + 3 * 294 + 4 * 209) / 8192)


def test_merge_takes_live_values_from_slots_and_marks_the_estimate() -> None:
    metrics = get_spec("llamacpp").parse_metrics(
        (FIX / "llamacpp-live" / "metrics-under-load.txt").read_text()
    )
    slots = parse_llamacpp_slots((FIX / "llamacpp-live" / "slots-busy.json").read_text())
    merged = merge_llamacpp(metrics, slots)
    assert merged.requests_running == 4.0
    assert merged.requests_waiting == 4.0  # llamacpp:requests_deferred
    assert merged.generation_tokens_in_flight == 836.0
    assert merged.kv_cache_usage == pytest.approx(slots.kv_usage_estimate)
    assert merged.kv_cache_usage_is_estimate is True
    assert merged.generation_tokens_total == metrics.generation_tokens_total
    assert merged.raw["slots.processing"] == 4.0


def test_idle_slots_hold_no_running_context() -> None:
    slots = parse_llamacpp_slots((FIX / "llamacpp-live" / "slots-idle.json").read_text())
    assert (slots.processing, slots.decoded_in_flight) == (0, 0)
    # slot 3 still caches a 64-token prompt, but no task holds it
    assert slots.kv_usage_estimate == 0.0


def test_h200_capture_64_slots() -> None:
    slots = parse_llamacpp_slots((FIX / "h200-llamacpp" / "slots-at-64-streams.json").read_text())
    metrics = get_spec("llamacpp").parse_metrics(
        (FIX / "h200-llamacpp" / "metrics-at-64-streams.txt").read_text()
    )
    merged = merge_llamacpp(metrics, slots)
    assert slots.n_slots == 64
    # the two captures were moments apart: /metrics saw all 64 slots busy, /slots
    # 16 (a round was ending); running follows the live /slots view
    assert metrics.requests_running == 64.0
    assert merged.requests_running == float(slots.processing) == 16.0
    assert merged.requests_waiting == 0.0


def test_server_gauge_wins_over_the_estimate() -> None:
    legacy = "# TYPE llamacpp:kv_cache_usage_ratio gauge\nllamacpp:kv_cache_usage_ratio 0.5\n"
    metrics = get_spec("llamacpp").parse_metrics(legacy)
    slots = parse_llamacpp_slots((FIX / "llamacpp-live" / "slots-busy.json").read_text())
    merged = merge_llamacpp(metrics, slots)
    assert (merged.kv_cache_usage, merged.kv_cache_usage_is_estimate) == (0.5, False)


def test_older_builds_report_n_past() -> None:
    payload = json.dumps(
        [{"id": 0, "n_ctx": 1000, "is_processing": True, "n_past": 250,
          "next_token": {"n_decoded": 50}}]
    )  # fmt: skip
    slots = parse_llamacpp_slots(payload)
    assert slots.kv_usage_estimate == 0.25
    assert slots.decoded_in_flight == 50


@pytest.mark.parametrize(
    "payload",
    [
        b"",
        b'[{"id":0,"n_ctx":2048,"is_proc',
        b'{"error":{"code":501,"message":"This server does not support slots endpoint."}}',
        b'[{"id": 0}]',
        b"[1, 2]",
        b'{"slots": []}',
    ],
)
def test_bad_slots_payloads_are_clear_errors(payload: bytes) -> None:
    with pytest.raises(MetricsParseError, match="/slots"):
        parse_llamacpp_slots(payload)


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        ("n_ctx", 10**40, "n_ctx = 1e+40 is outside 0..2147483647"),
        ("n_ctx", 10**400, "n_ctx: an integer beyond 1.8e308"),
        ("n_ctx", -1, "n_ctx = -1 is outside"),
        ("n_past", 2**31, "n_past = 2.14748e+09 is outside"),
    ],
    ids=["n_ctx-1e40", "n_ctx-1e400", "n_ctx-negative", "n_past-past-int32"],
)
def test_impossible_slot_values_are_a_parse_error(field: str, value: int, says: str) -> None:
    slot = {"id": 0, "n_ctx": 2048, "is_processing": True, field: value}
    with pytest.raises(MetricsParseError, match=re.escape(says)):
        parse_llamacpp_slots(json.dumps([slot]))


@pytest.mark.parametrize(
    ("kind", "payload"),
    [
        ("trtllm", [{"numActiveRequests": 10**400}]),
        ("ollama", {"models": [{"name": "m", "size": 10**400}]}),
    ],
    ids=["trtllm", "ollama"],
)
def test_json_dialects_refuse_numbers_beyond_any_float(kind: str, payload: object) -> None:
    with pytest.raises(MetricsParseError, match=re.escape("integer beyond 1.8e308")):
        get_spec(kind).parse_metrics(json.dumps(payload))
