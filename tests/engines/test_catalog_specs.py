"""Each engine's launch config renders its real flags; health, quirks, log scraping."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from engines.catalog import (
    Health,
    LaunchConfig,
    UnsupportedOption,
    all_specs,
    get_spec,
    kinds,
)

FULL = LaunchConfig(
    model="meta-llama/Llama-3.1-8B-Instruct",
    port=9001,
    tensor_parallel=2,
    context_len=8192,
    gpu_mem_fraction=0.85,
    quantization="fp8",
    max_num_seqs=64,
    api_key="s3cret",
)
TUNING = {  # one tuning flag each engine's extra_flags allows, in its own spelling
    "vllm": ("--seed", "7"),
    "sglang": ("--random-seed", "7"),
    "tgi": ("--max-best-of", "2"),
    "lmdeploy": ("--cache-block-seq-len", "64"),
}

EXPECTED_FLAGS = {
    "vllm": [
        "--model", "meta-llama/Llama-3.1-8B-Instruct", "--host", "0.0.0.0", "--port", "9001",
        "--tensor-parallel-size", "2", "--pipeline-parallel-size", "1", "--max-model-len", "8192",
        "--gpu-memory-utilization", "0.85", "--quantization", "fp8", "--max-num-seqs", "64",
        "--api-key", "s3cret", "--seed", "7",
    ],
    "sglang": [
        "--model-path", "meta-llama/Llama-3.1-8B-Instruct", "--host", "0.0.0.0", "--port", "9001",
        "--tp-size", "2", "--pp-size", "1", "--context-length", "8192",
        "--mem-fraction-static", "0.85", "--quantization", "fp8", "--max-running-requests", "64",
        "--enable-metrics", "--api-key", "s3cret", "--random-seed", "7",
    ],
    "tgi": [
        "--model-id", "meta-llama/Llama-3.1-8B-Instruct", "--hostname", "0.0.0.0",
        "--port", "9001", "--num-shard", "2", "--max-total-tokens", "8192",
        "--cuda-memory-fraction", "0.85", "--quantize", "fp8",
        "--max-batch-size", "64", "--max-concurrent-requests", "512", "--api-key", "s3cret",
        "--max-best-of", "2",
    ],
    "lmdeploy": [
        "meta-llama/Llama-3.1-8B-Instruct", "--server-name", "0.0.0.0", "--server-port", "9001",
        "--tp", "2", "--session-len", "8192", "--cache-max-entry-count", "0.85",
        "--model-format", "fp8", "--max-batch-size", "64", "--enable-metrics",
        "--api-keys", "s3cret", "--cache-block-seq-len", "64",
    ],
}  # fmt: skip


@pytest.mark.parametrize("kind", sorted(EXPECTED_FLAGS))
def test_full_config_renders_the_engines_own_flags(kind: str) -> None:
    assert (
        get_spec(kind).command_args(replace(FULL, extra_args=TUNING[kind]))
        == (EXPECTED_FLAGS[kind])
    )


def test_trtllm_flags_use_underscores_and_positional_model() -> None:
    cfg = LaunchConfig(
        model="/models/llama", tensor_parallel=4, pipeline_parallel=2, context_len=4096,
        gpu_mem_fraction=0.9, max_num_seqs=128,
    )  # fmt: skip
    assert get_spec("trtllm").command_args(cfg) == [
        "/models/llama", "--extra_llm_api_options", "/etc/infer-top/llm-api-options.yml",
        "--backend", "pytorch", "--host", "0.0.0.0", "--port", "8000",
        "--tp_size", "4", "--pp_size", "2", "--max_seq_len", "4096",
        "--kv_cache_free_gpu_memory_fraction", "0.9", "--max_batch_size", "128",
    ]  # fmt: skip


def test_llamacpp_context_is_per_slot_times_slots() -> None:
    cfg = LaunchConfig(model="/models/m.gguf", port=8080, context_len=2048, max_num_seqs=4)
    args = get_spec("llamacpp").command_args(cfg)
    assert args[args.index("-c") + 1] == "8192"
    assert args[args.index("-np") + 1] == "4"
    assert "--metrics" in args and "--slots" in args
    no_metrics = get_spec("llamacpp").command_args(
        LaunchConfig(model="m", metrics=False, tensor_parallel=2)
    )
    assert "--metrics" not in no_metrics
    assert no_metrics[no_metrics.index("--split-mode") + 1] == "row"


def test_ollama_is_configured_by_environment() -> None:
    spec = get_spec("ollama")
    cfg = LaunchConfig(model="llama3.1:8b", port=11500, context_len=8192, max_num_seqs=4)
    assert spec.command_args(cfg) == ["serve"]
    env = spec.compose_env(cfg, deployment_id="d1", node="orin-1", platform="jetson")
    assert env["OLLAMA_CONTEXT_LENGTH"] == "8192"
    assert env["OLLAMA_NUM_PARALLEL"] == "4"
    assert env["OLLAMA_HOST"] == "0.0.0.0:11434"  # inside the container
    assert env["ENGINE_PORT"] == "11500"


@pytest.mark.parametrize(
    ("kind", "cfg", "option"),
    [
        ("tgi", LaunchConfig(model="m", pipeline_parallel=2), "pipeline_parallel"),
        ("lmdeploy", LaunchConfig(model="m", pipeline_parallel=2), "pipeline_parallel"),
        ("trtllm", LaunchConfig(model="m", api_key="k"), "api_key"),
        ("trtllm", LaunchConfig(model="m", quantization="awq"), "quantization"),
        ("llamacpp", LaunchConfig(model="m", gpu_mem_fraction=0.5), "gpu_mem_fraction"),
        ("ollama", LaunchConfig(model="m", tensor_parallel=2), "tensor_parallel"),
        ("ollama", LaunchConfig(model="m", api_key="k"), "api_key"),
    ],
)
def test_options_an_engine_cannot_honour_are_refused_by_name(
    kind: str, cfg: LaunchConfig, option: str
) -> None:
    with pytest.raises(UnsupportedOption, match=option):
        get_spec(kind).command_args(cfg)


@pytest.mark.parametrize(
    "bad",
    [
        {"port": 0},
        {"tensor_parallel": 0},
        {"gpu_mem_fraction": 1.5},
        {"context_len": 0},
        {"quantization": "fp8; rm -rf /"},
        {"model": ""},
        {"model": "a\nb"},
        {"api_key": "k\x00"},
        {"extra_args": ("--x", "y\r")},
    ],
)
def test_launch_config_rejects_nonsense(bad: dict[str, object]) -> None:
    kwargs: dict[str, object] = {"model": "m", **bad}
    with pytest.raises(ValueError, match="invalid LaunchConfig"):
        LaunchConfig(**kwargs)  # type: ignore[arg-type]


def test_catalog_lists_the_seven_engines_and_unknown_kinds_name_them() -> None:
    assert kinds() == ("vllm", "sglang", "tgi", "llamacpp", "ollama", "trtllm", "lmdeploy")
    assert [s.kind for s in all_specs()] == list(kinds())
    with pytest.raises(KeyError, match="known: vllm, sglang, tgi"):
        get_spec("triton")


def test_jetson_images_exist_exactly_for_jetson_containers_engines() -> None:
    jetson = {s.kind: s.jetson_image for s in all_specs() if s.jetson_image}
    assert set(jetson) == {"vllm", "ollama", "llamacpp"}
    assert all(image.startswith("dustynv/") for image in jetson.values())
    with pytest.raises(UnsupportedOption, match="no Jetson image"):
        get_spec("tgi").compose_name("jetson")
    assert get_spec("vllm").compose_name("jetson") == "vllm-jetson"
    assert get_spec("llamacpp").compose_name("cpu") == "llama-server-cpu"


LOADING_503 = b'{"error":{"code":503,"message":"Loading model","type":"unavailable_error"}}'


@pytest.mark.parametrize(
    ("kind", "status", "body", "expected"),
    [
        ("llamacpp", 503, LOADING_503, Health.LOADING),
        ("llamacpp", 200, b'{"status":"ok"}', Health.READY),
        ("llamacpp", None, None, Health.DEAD),  # binds first: refused means gone
        ("llamacpp", 503, b'{"error":{"code":503,"message":"slot unavailable"}}',
         Health.UNHEALTHY),
        ("vllm", None, None, Health.LOADING),  # port opens only after loading
        ("vllm", 200, b"", Health.READY),
        ("vllm", 500, b"EngineDeadError", Health.UNHEALTHY),
        ("sglang", 503, b"", Health.LOADING),  # warm-up in progress
        ("lmdeploy", 200, b'{"status": "loading"}', Health.LOADING),
        ("lmdeploy", 200, b'{"status": "error"}', Health.UNHEALTHY),
        ("ollama", 200, b"Ollama is running", Health.READY),
        ("ollama", None, None, Health.DEAD),
        ("tgi", 404, b"", Health.UNHEALTHY),
    ],
)  # fmt: skip
def test_health_semantics(
    kind: str, status: int | None, body: bytes | None, expected: Health
) -> None:
    assert get_spec(kind).classify_health(status, body) is expected


def test_exact_length_fields_where_the_engine_can_force_it() -> None:
    assert get_spec("vllm").exact_length_fields(128) == {
        "max_tokens": 128, "min_tokens": 128, "ignore_eos": True,
    }  # fmt: skip
    assert get_spec("llamacpp").exact_length_fields(64) == {"max_tokens": 64, "ignore_eos": True}
    assert get_spec("tgi").exact_length_fields(64) is None
    assert get_spec("ollama").exact_length_fields(64) is None
    forcing = {s.kind for s in all_specs() if s.exact_length_fields(8) is not None}
    assert forcing == {"vllm", "sglang", "trtllm", "lmdeploy", "llamacpp"}
    with pytest.raises(ValueError):
        get_spec("vllm").exact_length_fields(0)


def test_metrics_endpoints_per_engine() -> None:
    trtllm = get_spec("trtllm")
    assert (trtllm.metrics_path, trtllm.metrics_format) == ("/metrics", "json")
    assert (trtllm.second_page_path, trtllm.second_page_format) == (
        "/prometheus/metrics", "prometheus",
    )  # fmt: skip
    assert get_spec("ollama").metrics_path == "/api/ps"
    assert get_spec("ollama").metrics_format == "ollama_ps"
    assert {s.metrics_format for s in all_specs()} == {"prometheus", "ollama_ps", "json"}


def test_kv_capacity_from_real_llama_server_log(fixtures_dir: Path) -> None:
    log = (fixtures_dir / "h200-llamacpp" / "server-startup.log").read_text()
    assert get_spec("llamacpp").kv_capacity_from_log(log) == 64 * 2048


@pytest.mark.parametrize(
    ("kind", "line", "tokens"),
    [
        ("vllm", "INFO 05-01 12:00:00 [kv_cache_utils.py:716] GPU KV cache size: 1,234,560 tokens",
         1234560),
        ("sglang", "KV Cache is allocated. max_total_num_tokens=452112, chunked_prefill_size=8192",
         452112),
        ("tgi", "INFO text_generation_router: Setting max batch total tokens to 131072", 131072),
        ("llamacpp", "llama_context: n_ctx         = 4096", 4096),
        ("llamacpp", "initializing, n_slots = 1, n_ctx_slot = 8192, kv_unified = 'true'", 8192),
        ("vllm", "nothing about the cache here", None),
    ],
)  # fmt: skip
def test_kv_capacity_log_lines(kind: str, line: str, tokens: int | None) -> None:
    assert get_spec(kind).kv_capacity_from_log(line) == tokens


def test_trtllm_kv_capacity_from_documented_log(fixtures_dir: Path) -> None:
    text = (fixtures_dir / "engines" / "trtllm_metrics_samples.txt").read_text()
    log = "\n".join(line for line in text.splitlines() if line.startswith("[TensorRT-LLM]"))
    assert get_spec("trtllm").kv_capacity_from_log(log) == 263008
    blocks_only = "\n".join(line for line in log.splitlines() if "MemUsageChange" not in line)
    assert get_spec("trtllm").kv_capacity_from_log(blocks_only) == 8219 * 32


def test_per_engine_facts_agree_with_each_other() -> None:
    for spec in all_specs():
        # what the load generator sends to force a length, the engine honours
        assert set(spec.exact_length_style or ()) - {"max_tokens"} <= spec.length_fields
        # a port that opens only once loaded: a refused connection then means "loading"
        assert spec.loading_status is not None or spec.refuses_while_loading, spec.kind
        assert (spec.second_page_path is not None) is (spec.kind in ("llamacpp", "trtllm"))
        assert (spec.second_page_path is None) is (spec.second_page_format is None)
        reads_prometheus = "prometheus" in (spec.metrics_format, spec.second_page_format)
        assert (spec.metric_names is None) is not reads_prometheus, spec.kind
    assert get_spec("llamacpp").closes_after_stream
    assert [s.kind for s in all_specs() if s.memory.fraction is None] == ["llamacpp", "ollama"]
