"""Every engine's recorded metrics sample parses into the expected EngineSample."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engines.catalog import MetricsParseError, get_spec
from engines.dialects import ollama_response_counts
from engines.sample import EngineSample

ENGINES = Path(__file__).resolve().parents[1] / "fixtures" / "engines"
LIVE = Path(__file__).resolve().parents[1] / "fixtures" / "llamacpp-live"


def exposition(path: Path, *, start: str | None = None, stop: str | None = None) -> str:
    """The Prometheus part of a provenance-annotated fixture: drop the shell
    prompt and the "..." elisions the docs put between verbatim lines."""
    text = path.read_text()
    if start:
        text = text[text.index(start) :]
    if stop:
        text = text[: text.index(stop)]
    keep = [ln for ln in text.splitlines() if not ln.startswith(("$ ", "..."))]
    return "\n".join(keep) + "\n"


def test_vllm_v1_sample() -> None:
    text = exposition(ENGINES / "vllm_v1_fixture_from_source.txt")
    s = get_spec("vllm").parse_metrics(text)
    assert (s.engine, s.kv_cache_usage, s.kv_cache_usage_is_estimate) == ("vllm", 0.4375, False)
    assert (s.requests_running, s.requests_waiting) == (12.0, 3.0)
    assert (s.prompt_tokens_total, s.generation_tokens_total) == (20480.0, 5120.0)
    assert s.preemptions_total == 0.0  # reported as zero: a real 0, not None
    assert s.prefix_cache_hit_rate == pytest.approx(8192 / 20480)
    assert s.ttft is not None and (s.ttft.count, s.ttft.sum_s) == (40.0, 3.2)
    assert s.ttft.buckets == ((0.1, 30.0), (0.25, 40.0), (float("inf"), 40.0))
    assert s.inter_token_latency is not None and s.inter_token_latency.count == 5080.0
    assert s.e2e_latency is not None and s.e2e_latency.sum_s == 49.0
    assert s.generation_tokens_in_flight is None
    assert s.engine_version is None  # not told: unknown, never the catalog's pin
    assert get_spec("vllm").parse_metrics(text, version="0.11.0").engine_version == "0.11.0"
    key = 'vllm:num_requests_running{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"}'
    assert s.raw[key] == 12.0


LEGACY_VLLM = """\
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="m"} 5.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="m"} 1.0
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{model_name="m"} 0.25
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{model_name="m"} 0.75
# TYPE vllm:gpu_prefix_cache_queries counter
vllm:gpu_prefix_cache_queries_total{model_name="m"} 1000.0
# TYPE vllm:gpu_prefix_cache_hits counter
vllm:gpu_prefix_cache_hits_total{model_name="m"} 250.0
# TYPE vllm:time_per_output_token_seconds histogram
vllm:time_per_output_token_seconds_bucket{le="+Inf",model_name="m"} 10.0
vllm:time_per_output_token_seconds_count{model_name="m"} 10.0
vllm:time_per_output_token_seconds_sum{model_name="m"} 0.5
"""


@pytest.mark.parametrize(
    ("version", "kv", "itl_count"),
    [
        ("0.8.5", 0.25, 10.0),  # before the rename: the old gauge
        ("0.9.2", 0.75, 10.0),  # both exported: the new name wins
        ("0.11.0", 0.75, None),  # ITL renamed: the old histogram is a different thing
        ("unknown", 0.75, 10.0),  # version unknown: whichever name is there
        ("nightly-garbage", 0.75, 10.0),
    ],
)
def test_vllm_renames_are_version_aware(version: str, kv: float, itl_count: float | None) -> None:
    s = get_spec("vllm").parse_metrics(LEGACY_VLLM, version=version)
    assert s.kv_cache_usage == kv
    assert s.prefix_cache_hit_rate == 0.25
    assert (s.inter_token_latency.count if s.inter_token_latency else None) == itl_count


def test_sglang_docs_sample() -> None:
    s = get_spec("sglang").parse_metrics(exposition(ENGINES / "sglang_metrics_docs_sample.txt"))
    assert (s.kv_cache_usage, s.requests_running, s.requests_waiting) == (0.28, 162.0, 2826.0)
    assert s.prompt_tokens_total == 8128902.0
    assert s.prefix_cache_hit_rate == pytest.approx(0.007507552643049313)
    assert s.ttft is not None and s.ttft.count == 11008.0
    assert s.inter_token_latency is not None  # the older TPOT name
    assert s.preemptions_total is None


def test_tgi_counters_without_total_and_no_kv() -> None:
    s = get_spec("tgi").parse_metrics(exposition(ENGINES / "tgi_metrics_fixture_from_source.txt"))
    assert (s.requests_running, s.requests_waiting) == (16.0, 2.0)
    assert (s.prompt_tokens_total, s.generation_tokens_total) == (20480.0, 5120.0)
    assert s.kv_cache_usage is None and s.ttft is None and s.prefix_cache_hit_rate is None
    assert s.e2e_latency is not None and s.e2e_latency.count == 40.0
    assert s.raw['tgi_batch_inference_count_total{method="decode"}'] == 5000.0


def test_lmdeploy_sample() -> None:
    text = exposition(ENGINES / "lmdeploy_metrics_fixture_from_source.txt")
    s = get_spec("lmdeploy").parse_metrics(text)
    assert (s.kv_cache_usage, s.requests_running, s.requests_waiting) == (0.31, 8.0, 0.0)
    assert s.prefix_cache_hit_rate == 0.0
    assert s.inter_token_latency is not None and s.inter_token_latency.sum_s == 45.0
    assert s.inter_token_latency.buckets == ()  # count and sum only
    assert s.e2e_latency is None


def test_llamacpp_current_build_has_no_kv_gauge() -> None:
    text = exposition(ENGINES / "llamacpp_metrics_fixtures.txt", stop="# === B)")
    s = get_spec("llamacpp").parse_metrics(text)
    assert s.kv_cache_usage is None  # removed upstream in May 2025: n/a, not 0
    assert (s.prompt_tokens_total, s.generation_tokens_total) == (96641.0, 23210.0)
    assert (s.requests_running, s.requests_waiting) == (0.0, 0.0)
    assert s.prefix_cache_hit_rate == 0.0


def test_llamacpp_legacy_build_reports_kv_ratio() -> None:
    text = exposition(ENGINES / "llamacpp_metrics_fixtures.txt", start="# HELP", stop="#\n# === C)")
    legacy = text[text.index("# === B)") :]
    s = get_spec("llamacpp").parse_metrics(legacy)
    assert s.kv_cache_usage == 0.5 and s.kv_cache_usage_is_estimate is False
    assert s.prefix_cache_hit_rate is None  # no cached-token counter back then


def test_llamacpp_live_capture_under_load() -> None:
    s = get_spec("llamacpp").parse_metrics((LIVE / "metrics-under-load.txt").read_bytes())
    assert (s.requests_running, s.requests_waiting) == (4.0, 4.0)
    assert s.prefix_cache_hit_rate == pytest.approx(1609 / (1609 + 1684))


TRTLLM_ITERATION = [
    {"iter": 41, "numActiveRequests": 3, "numQueuedRequests": 0},
    {
        "gpuMemUsage": 56401920000,
        "iter": 42,
        "iterLatencyMS": 16.5,
        "numActiveRequests": 8,
        "numQueuedRequests": 2,
        "maxNumActiveRequests": 64,
        "kvCacheStats": {
            "maxNumBlocks": 8219,
            "freeNumBlocks": 6219,
            "usedNumBlocks": 2000,
            "tokensPerBlock": 32,
            "cacheHitRate": 0.5,
        },
        "inflightBatchingStats": {"numContextRequests": 1, "numGenRequests": 7},
    },
]


def test_trtllm_json_iteration_stats_newest_entry() -> None:
    s = get_spec("trtllm").parse_metrics(json.dumps(TRTLLM_ITERATION))
    assert s.kv_cache_usage == pytest.approx(2000 / 8219)
    assert (s.requests_running, s.requests_waiting) == (8.0, 2.0)
    assert s.prefix_cache_hit_rate == 0.5
    assert s.raw["inflightBatchingStats.numGenRequests"] == 7.0
    assert s.prompt_tokens_total is None  # iteration stats carry no token counters


def test_trtllm_empty_iteration_list_is_nothing_measured() -> None:
    s = get_spec("trtllm").parse_metrics(b"[]")
    assert s == EngineSample(engine="trtllm")


def test_trtllm_prometheus_page_wins_and_the_iteration_stats_fill_its_gaps() -> None:
    text = """\
# TYPE trtllm_kv_cache_utilization gauge
trtllm_kv_cache_utilization{model_name="m",engine_type="trtllm"} 0.6
# TYPE trtllm_num_requests_running gauge
trtllm_num_requests_running{model_name="m",engine_type="trtllm"} 5
# TYPE time_to_first_token_seconds histogram
time_to_first_token_seconds_bucket{le="+Inf",model_name="m"} 3
time_to_first_token_seconds_count{model_name="m"} 3
time_to_first_token_seconds_sum{model_name="m"} 0.3
"""
    spec = get_spec("trtllm")
    s = spec.with_second_page(spec.parse_metrics(json.dumps(TRTLLM_ITERATION)), text)
    assert (s.kv_cache_usage, s.requests_running) == (0.6, 5.0)  # the Prometheus gauges
    assert s.ttft is not None and (s.ttft.count, s.ttft.sum_s) == (3.0, 0.3)
    assert s.requests_waiting == 2.0  # only the iteration stats say it
    assert s.raw["inflightBatchingStats.numGenRequests"] == 7.0


def _json_blocks(path: Path) -> list[str]:
    """The JSON objects of the Ollama fixture (between its comment lines)."""
    blocks, current = [], []
    for line in path.read_text().splitlines():
        if line.startswith("#"):
            if current:
                blocks.append("\n".join(current))
                current = []
        else:
            current.append(line)
    if current:
        blocks.append("\n".join(current))
    return [b for b in blocks if b.strip()]


def test_ollama_ps_has_no_counters_only_models() -> None:
    ps, generate = _json_blocks(ENGINES / "ollama_api_samples.txt")
    s = get_spec("ollama").parse_metrics(ps)
    assert s.raw["models_loaded"] == 1.0
    assert s.raw["size_vram_bytes"] == 5137025024.0
    assert s.kv_cache_usage is None and s.requests_running is None
    assert s.prompt_tokens_total is None and s.generation_tokens_total is None
    assert ollama_response_counts(generate) == (26, 259)


@pytest.mark.parametrize(
    ("kind", "payload"),
    [
        ("vllm", b""),
        ("vllm", b"<html><body>502 Bad Gateway</body></html>"),
        ("vllm", b'vllm:num_requests_running{model_name="m" 3\n'),
        ("sglang", b"\xff\xfe not utf-8"),
        ("trtllm", b'[{"iter": 1, "kvCacheStats": {"maxNumBl'),
        ("ollama", b'{"models": [{"name": "x", "size": 5'),
        ("ollama", b'{"error": "unauthorized"}'),
    ],
)
def test_garbage_is_a_clear_parse_error(kind: str, payload: bytes) -> None:
    with pytest.raises(MetricsParseError, match=kind):
        get_spec(kind).parse_metrics(payload)


def test_trtllm_documented_json_example_parses_with_unreported_fields_none() -> None:
    text = (ENGINES / "trtllm_metrics_samples.txt").read_text()
    doc = text[text.index("[\n") : text.index("]\n") + 1]
    doc = "\n".join(ln for ln in doc.splitlines() if ln.strip() != "...")
    s = get_spec("trtllm").parse_metrics(doc)
    assert s.raw["gpuMemUsage"] == 56401920000.0
    assert s.raw["iterLatencyMS"] == pytest.approx(16.505143404006958)
    assert s.kv_cache_usage is None and s.requests_running is None  # elided: n/a, not 0


def _names(path: Path) -> set[str]:
    return {ln.split()[0] for ln in path.read_text().splitlines() if ln.strip() and ln[0] != "#"}


@pytest.mark.parametrize(
    ("version", "fixture"),
    [("0.11.0", "vllm_expected_metrics_v1_from_tests.txt"), ("0.8.5", "vllm_v0_legacy_names.txt")],
)
def test_vllm_dialect_names_exist_in_that_version(version: str, fixture: str) -> None:
    """Every series the dialect reads for a version is one vLLM really exports."""
    exported = _names(ENGINES / fixture)
    dialect = get_spec("vllm").metric_names_for(version)
    assert dialect is not None
    wanted = {
        "kv_usage": dialect.kv_usage,
        "running": dialect.running,
        "waiting": dialect.waiting,
        "ttft": tuple(f"{n}_count" for n in dialect.ttft),
        "itl": tuple(f"{n}_count" for n in dialect.itl),
    }
    for field, names in wanted.items():
        legacy_style = {n.removesuffix("_count") for n in names}
        assert set(names) & exported or legacy_style & exported, (field, names)
