"""Malformed metrics, truncated JSON, unknown versions: the exact outcome where
the input is built to have one (generated values parse back equal; inputs invalid
by construction give the declared error), and for arbitrary bytes a clear error or
None fields, never a crash (property tests over every engine's parser)."""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engines.catalog import (
    EngineSpec,
    Health,
    LaunchConfig,
    MetricsParseError,
    all_specs,
    env_file_text,
    kinds,
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
JSON_FORMATS = ("ollama_ps", "json")
version_st = st.one_of(st.none(), st.text(max_size=12), st.from_regex(r"v?\d{1,3}\.\d{1,3}.*"))


def assert_sane(sample: EngineSample) -> None:
    assert isinstance(sample, EngineSample)
    if sample.kv_cache_usage is not None:
        assert 0.0 <= sample.kv_cache_usage <= 1.0
    if sample.prefix_cache_hit_rate is not None:
        assert 0.0 <= sample.prefix_cache_hit_rate <= 1.0
    for value in (sample.requests_running, sample.requests_waiting):
        assert value is None or math.isfinite(value)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)


@SETTINGS
@given(
    spec=spec_st,
    payload=st.one_of(st.text(max_size=300), st.binary(max_size=300), json_values.map(json.dumps)),
    version=version_st,
)
def test_arbitrary_payloads(spec: EngineSpec, payload: str | bytes, version: str | None) -> None:
    """Fuzz: whether arbitrary bytes happen to be valid is unknown by construction,
    so either outcome passes; what is pinned is no other exception type, a message
    an operator can read, and in-range fields.  Known outcomes are pinned below."""
    try:
        sample = spec.parse_metrics(payload, version=version)
    except MetricsParseError as exc:
        assert str(exc)
    else:
        assert_sane(sample)


@SETTINGS
@given(spec=spec_st, head=st.binary(max_size=40), tail=st.binary(max_size=40))
def test_non_utf8_payloads_are_refused_as_such(spec: EngineSpec, head: bytes, tail: bytes) -> None:
    # 0xFF never occurs in UTF-8, so the payload is invalid by construction.
    with pytest.raises(MetricsParseError, match="not UTF-8"):
        spec.parse_metrics(head + b"\xff" + tail)


def sample_lines(text: str) -> int:
    return sum(1 for ln in text.splitlines() if ln.strip() and not ln.startswith("#"))


@SETTINGS
@given(
    spec=spec_st,
    which=st.sampled_from(["prometheus", "vllm"]),
    cut=st.integers(min_value=0, max_value=6000),
)
def test_truncated_prometheus_keeps_every_complete_line(
    spec: EngineSpec, which: str, cut: int
) -> None:
    """A scrape cut short: each complete sample line still reads its full value,
    a cut line adds at most one series or is refused, and no line at all is "no
    samples" (not zeros).  Ollama's and TensorRT-LLM's metrics pages are JSON:
    Prometheus text is never JSON."""
    text = REAL[which][:cut]
    if spec.metrics_format in JSON_FORMATS:
        with pytest.raises(MetricsParseError, match="not JSON"):
            spec.parse_metrics(text)
        return
    full = spec.parse_metrics(REAL[which]).raw
    whole = text[: text.rfind("\n") + 1]  # the complete lines before the cut
    complete = sample_lines(whole)
    if text == whole:
        if not complete:
            with pytest.raises(MetricsParseError, match="no samples"):
                spec.parse_metrics(text)
            return
        raw = spec.parse_metrics(text).raw
        assert raw.items() <= full.items() and len(raw) == complete
        return
    # A line cut short: refused, or read with every complete line intact.
    try:
        raw = spec.parse_metrics(text).raw
    except MetricsParseError as exc:
        assert re.search(
            "not Prometheus text" if complete else "not Prometheus|no samples", str(exc)
        )
        return
    kept = {k: full[k] for k in spec.parse_metrics(whole).raw} if complete else {}
    assert {k: raw[k] for k in kept} == kept and len(raw) <= len(kept) + 1


@SETTINGS
@given(spec=spec_st, cut=st.integers(min_value=0, max_value=len(REAL["slots"]) - 1))
def test_truncated_json_is_refused_as_not_json(spec: EngineSpec, cut: int) -> None:
    """The /slots JSON cut anywhere before its end is invalid by construction.
    Engines that read Prometheus text refuse it as such; empty is "no samples"."""
    text = REAL["slots"][:cut]
    if spec.metrics_format in JSON_FORMATS:
        error = "not JSON"
    else:
        error = "not Prometheus text" if text else "no samples"
    with pytest.raises(MetricsParseError, match=error):
        spec.parse_metrics(text)


def escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


PROM_SPECS = [spec for spec in all_specs() if spec.metrics_format == "prometheus"]
LABEL_TEXT = st.text(alphabet=st.characters(exclude_categories=("Cc", "Cs")), max_size=6)


@SETTINGS
@given(
    spec=st.sampled_from(PROM_SPECS),
    models=st.lists(LABEL_TEXT, min_size=1, max_size=3, unique=True),
    data=st.data(),
)
def test_generated_exposition_parses_to_the_generated_values(
    spec: EngineSpec, models: list[str], data: st.DataObject
) -> None:
    """Each field's series over several label sets: counts sum, the KV ratio is
    the mean, every series is kept raw, and what was not sent stays None."""
    dialect = spec.metric_names_for(spec.image_version)
    counts = st.floats(min_value=0.0, max_value=1e12)
    fields = {
        "kv_cache_usage": (dialect.kv_usage, st.floats(min_value=0.0, max_value=1.0)),
        "requests_running": (dialect.running, counts),
        "requests_waiting": (dialect.waiting, counts),
        "prompt_tokens_total": (dialect.prompt_tokens, counts),
        "generation_tokens_total": (dialect.generation_tokens, counts),
    }
    lines: list[str] = []
    raw: dict[str, float] = {}
    expected: dict[str, float | None] = {}
    for field, (names, values_st) in fields.items():
        if not names:
            expected[field] = None
            continue
        name = names[0]
        family = name.removesuffix("_total")
        lines.append(f"# TYPE {family} {'counter' if family != name else 'gauge'}")
        values = data.draw(st.lists(values_st, min_size=len(models), max_size=len(models)))
        for model, value in zip(models, values, strict=True):
            lines.append(f'{name}{{model_name="{escape_label(model)}"}} {value!r}')
            raw[f'{name}{{model_name="{model}"}}'] = value
        expected[field] = sum(values) / len(values) if field == "kv_cache_usage" else sum(values)
    sample = spec.parse_metrics("\n".join(lines) + "\n", version=spec.image_version)
    assert sample == EngineSample(
        engine=spec.kind, engine_version=spec.image_version, raw=raw, **expected
    )


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
