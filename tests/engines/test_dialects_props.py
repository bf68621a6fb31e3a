"""Malformed metrics, truncated JSON, unknown versions: a clear error or None
fields, never a crash (property tests over every engine's parser)."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engines.catalog import (
    Health,
    LaunchConfig,
    MetricsParseError,
    all_specs,
    env_file_text,
    kinds,
    merge_llamacpp,
    parse_llamacpp_slots,
)
from engines.fit import KNOWN_MODELS, estimate_fit
from engines.sample import EngineSample

FIX = Path(__file__).resolve().parents[1] / "fixtures"
REAL = {
    "prometheus": (FIX / "llamacpp-live" / "metrics-under-load.txt").read_text(),
    "slots": (FIX / "llamacpp-live" / "slots-busy.json").read_text(),
    "vllm": (FIX / "engines" / "vllm_v1_fixture_from_source.txt").read_text(),
}
# PROP_EXAMPLES=2000 for a deeper search than the default quick run
SETTINGS = settings(
    max_examples=int(os.environ.get("PROP_EXAMPLES", "60")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)

spec_st = st.sampled_from(all_specs())
version_st = st.one_of(st.none(), st.text(max_size=12), st.from_regex(r"v?\d{1,3}\.\d{1,3}.*"))


def assert_sane(sample: EngineSample) -> None:
    assert isinstance(sample, EngineSample)
    if sample.kv_cache_usage is not None:
        assert 0.0 <= sample.kv_cache_usage <= 1.0
    if sample.prefix_cache_hit_rate is not None:
        assert 0.0 <= sample.prefix_cache_hit_rate <= 1.0
    for value in (sample.requests_running, sample.requests_waiting):
        assert value is None or math.isfinite(value)


def parse_or_clear_error(spec: object, payload: str | bytes, version: str | None) -> None:
    try:
        sample = spec.parse_metrics(payload, version=version)  # type: ignore[attr-defined]
    except MetricsParseError as exc:
        assert str(exc)  # a message an operator can read
    else:
        assert_sane(sample)


@SETTINGS
@given(
    spec=spec_st,
    payload=st.one_of(st.text(max_size=300), st.binary(max_size=300)),
    version=version_st,
)
def test_arbitrary_payloads(spec: object, payload: str | bytes, version: str | None) -> None:
    parse_or_clear_error(spec, payload, version)


@SETTINGS
@given(
    spec=spec_st,
    cut=st.integers(min_value=0, max_value=6000),
    version=version_st,
    which=st.sampled_from(sorted(REAL)),
)
def test_truncated_real_payloads(spec: object, cut: int, version: str | None, which: str) -> None:
    parse_or_clear_error(spec, REAL[which][:cut], version)


@SETTINGS
@given(cut=st.integers(min_value=0, max_value=len(REAL["slots"])))
def test_truncated_slots_json(cut: int) -> None:
    try:
        slots = parse_llamacpp_slots(REAL["slots"][:cut])
    except MetricsParseError:
        return
    merged = merge_llamacpp(EngineSample(engine="llamacpp"), slots)
    assert_sane(merged)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)
slot_like = st.fixed_dictionaries(
    {"id": json_values, "n_ctx": json_values, "is_processing": json_values},
    optional={"n_prompt_tokens": json_values, "next_token": json_values, "n_past": json_values},
)


@SETTINGS
@given(doc=st.one_of(json_values, st.lists(slot_like, max_size=4)))
def test_odd_json_documents(doc: object) -> None:
    payload = json.dumps(doc)
    try:
        slots = parse_llamacpp_slots(payload)
    except MetricsParseError:
        pass
    else:
        assert_sane(merge_llamacpp(EngineSample(engine="llamacpp"), slots))
    for spec in all_specs():
        if spec.metrics_format == "ollama_ps" or spec.json_metrics_path:
            parse_or_clear_error(spec, payload, None)


@SETTINGS
@given(
    model=st.sampled_from(sorted(KNOWN_MODELS)),
    kind=st.sampled_from(kinds()),
    ctx=st.integers(min_value=1, max_value=262144),
    seqs=st.integers(min_value=1, max_value=512),
    tp=st.sampled_from([1, 2, 4, 8, 16]),
    mem_gib=st.integers(min_value=1, max_value=192),
)
def test_fit_estimate_is_consistent(
    model: str, kind: str, ctx: int, seqs: int, tp: int, mem_gib: int
) -> None:
    est = estimate_fit(
        KNOWN_MODELS[model],
        kind,
        context_len=ctx,
        concurrent_seqs=seqs,
        tp=tp,
        gpu_mem_total_bytes=mem_gib * 1024**3,
    )
    assert est.total_bytes >= est.weights_bytes + est.kv_bytes
    assert est.max_concurrent_at_context >= 0
    # "fits" means the asked-for sequences are within what the engine would hold
    if est.fits and kind not in ("llamacpp", "ollama"):
        assert est.max_concurrent_at_context >= seqs


@SETTINGS
@given(
    spec=spec_st,
    status=st.one_of(st.none(), st.integers(min_value=100, max_value=599)),
    body=st.one_of(
        st.none(), st.binary(max_size=80), json_values.map(lambda v: json.dumps(v).encode())
    ),
)
def test_health_probe_always_classifies(
    spec: object, status: int | None, body: bytes | None
) -> None:
    health = spec.classify_health(status, body)  # type: ignore[attr-defined]
    assert health in set(Health)
    if status is not None and not 200 <= status < 300 and status != 503:
        assert health is Health.UNHEALTHY


PRINTABLE = st.characters(exclude_categories=("Cc", "Cs"))
launch_st = st.builds(
    LaunchConfig,
    model=st.text(alphabet=PRINTABLE, min_size=1, max_size=20),
    port=st.integers(min_value=1, max_value=65535),
    tensor_parallel=st.integers(min_value=1, max_value=8),
    pipeline_parallel=st.integers(min_value=1, max_value=4),
    context_len=st.one_of(st.none(), st.integers(min_value=1, max_value=1 << 20)),
    gpu_mem_fraction=st.one_of(st.none(), st.floats(min_value=0.01, max_value=1.0)),
    max_num_seqs=st.one_of(st.none(), st.integers(min_value=1, max_value=1024)),
    api_key=st.one_of(st.none(), st.text(alphabet=PRINTABLE, min_size=1, max_size=12)),
    extra_args=st.lists(st.text(alphabet=PRINTABLE, max_size=8), max_size=3).map(tuple),
)


@SETTINGS
@given(
    spec=spec_st,
    cfg=st.one_of(launch_st, st.just(LaunchConfig(model="m"))),
    platform=st.sampled_from(["nvidia", "jetson", "cpu"]),
)
def test_launch_rendering_refuses_clearly_or_yields_a_safe_env(
    spec: object, cfg: LaunchConfig, platform: str
) -> None:
    try:
        args = spec.command_args(cfg)  # type: ignore[attr-defined]
        env = spec.compose_env(cfg, deployment_id="d", node="n", platform=platform)  # type: ignore[attr-defined]
    except ValueError as exc:  # UnsupportedOption, unsafe characters, no such platform
        assert str(exc)
        return
    assert all(isinstance(a, str) for a in args)
    text = env_file_text(env)
    assert text.count("\n") == len(env)  # one line per variable: nothing smuggled in
