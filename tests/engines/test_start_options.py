"""Typed start options: each engine spells them its own way, or refuses them by name."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from engines.catalog import LaunchConfig, UnsupportedOption, get_spec
from engines.catalog.options import options_text, run_options

BASE = LaunchConfig(model="/models/m")

# (engine, options, the arguments they add) in each engine's own CLI spelling
RENDERED: list[tuple[str, dict[str, Any], list[str]]] = [
    ("vllm", {"prefix_caching": False}, ["--no-enable-prefix-caching"]),
    ("vllm", {"prefix_caching": True}, ["--enable-prefix-caching"]),
    ("vllm", {"chunked_prefill": False}, ["--no-enable-chunked-prefill"]),
    (
        "vllm",
        {"max_batched_tokens": 2048, "kv_cache_dtype": "fp8"},
        ["--max-num-batched-tokens", "2048", "--kv-cache-dtype", "fp8"],
    ),
    ("sglang", {"prefix_caching": False}, ["--disable-radix-cache"]),
    ("sglang", {"prefix_caching": True}, []),  # the radix cache is on by default
    ("sglang", {"chunked_prefill": False}, ["--chunked-prefill-size", "-1"]),
    (
        "sglang",
        {"prefill_chunk_tokens": 4096, "max_batched_tokens": 8192, "kv_cache_dtype": "fp8_e5m2"},
        [
            "--chunked-prefill-size",
            "4096",
            "--max-prefill-tokens",
            "8192",
            "--kv-cache-dtype",
            "fp8_e5m2",
        ],
    ),
    ("tgi", {"prefill_chunk_tokens": 4096}, ["--max-batch-prefill-tokens", "4096"]),
    ("tgi", {"kv_cache_dtype": "fp8_e5m2"}, ["--kv-cache-dtype", "fp8_e5m2"]),
    ("llamacpp", {"prefix_caching": False}, ["--no-cache-prompt"]),
    (
        "llamacpp",
        {"max_batched_tokens": 256, "kv_cache_dtype": "q8_0"},
        ["--batch-size", "256", "--cache-type-k", "q8_0", "--cache-type-v", "q8_0"],
    ),
    ("trtllm", {"chunked_prefill": True}, ["--enable_chunked_prefill"]),
    ("trtllm", {"max_batched_tokens": 8192}, ["--max_num_tokens", "8192"]),
    ("lmdeploy", {"prefix_caching": True}, ["--enable-prefix-caching"]),
    ("lmdeploy", {"kv_cache_dtype": "int8"}, ["--quant-policy", "8"]),
    ("lmdeploy", {"prefill_chunk_tokens": 4096}, ["--max-prefill-token-num", "4096"]),
]


@pytest.mark.parametrize(("kind", "options", "args"), RENDERED)
def test_each_engine_spells_the_options_its_own_way(
    kind: str, options: dict[str, Any], args: list[str]
) -> None:
    spec = get_spec(kind)
    plain = spec.command_args(BASE)
    rendered = spec.command_args(replace(BASE, **options))
    assert rendered == plain + args
    # and the same arguments reach the engine under Compose
    env = spec.compose_env(replace(BASE, **options), deployment_id="d", node="n", platform="nvidia")
    assert env["ENGINE_ARGS"].endswith(" ".join(args))


REFUSED: list[tuple[str, str, Any, str]] = [
    ("vllm", "prefill_chunk_tokens", 512, "vLLM has no switch for prefill_chunk_tokens"),
    ("sglang", "kv_cache_dtype", "fp8", "SGLang takes kv_cache_dtype as one of"),
    ("tgi", "prefix_caching", False, "TGI cannot turn prefix_caching off"),
    ("tgi", "chunked_prefill", True, "TGI has no switch for chunked_prefill"),
    ("tgi", "max_batched_tokens", 512, "TGI has no switch for max_batched_tokens"),
    ("llamacpp", "chunked_prefill", False, "llama.cpp cannot turn chunked_prefill off"),
    ("llamacpp", "kv_cache_dtype", "fp8", "llama.cpp takes kv_cache_dtype as one of"),
    ("ollama", "prefix_caching", False, "Ollama cannot turn prefix_caching off"),
    ("ollama", "max_batched_tokens", 512, "Ollama has no switch for max_batched_tokens"),
    ("trtllm", "prefix_caching", True, "TensorRT-LLM has no switch for prefix_caching"),
    ("trtllm", "kv_cache_dtype", "fp8", "TensorRT-LLM has no switch for kv_cache_dtype"),
    ("lmdeploy", "chunked_prefill", False, "LMDeploy has no switch for chunked_prefill"),
    ("lmdeploy", "max_batched_tokens", 512, "LMDeploy has no switch for max_batched_tokens"),
]


@pytest.mark.parametrize(("kind", "option", "value", "words"), REFUSED)
def test_an_engine_without_the_switch_refuses_it_by_name(
    kind: str, option: str, value: Any, words: str
) -> None:
    cfg = replace(BASE, **{option: value})
    spec = get_spec(kind)
    with pytest.raises(UnsupportedOption, match=words):
        spec.command_args(cfg)
    with pytest.raises(UnsupportedOption, match=words):
        spec.compose_env(cfg, deployment_id="d", node="n", platform="nvidia")


def test_two_options_that_set_one_flag_are_refused_as_contradicting() -> None:
    cfg = replace(BASE, chunked_prefill=False, prefill_chunk_tokens=4096)
    with pytest.raises(UnsupportedOption, match="chunked_prefill and prefill_chunk_tokens"):
        get_spec("sglang").command_args(cfg)


@pytest.mark.parametrize(
    ("kind", "flag", "option"),
    [
        ("vllm", "--enable-prefix-caching", "prefix_caching"),
        ("vllm", "--max-num-batched-tokens=64", "max_batched_tokens"),
        ("llamacpp", "--cache-type-k", "kv_cache_dtype"),
        ("lmdeploy", "--quant-policy", "kv_cache_dtype"),
    ],
)
def test_an_extra_argument_a_typed_option_spells_points_to_the_option(
    kind: str, flag: str, option: str
) -> None:
    cfg = replace(BASE, extra_args=(flag, "8") if "=" not in flag else (flag,))
    with pytest.raises(UnsupportedOption, match=f"set {option} instead"):
        get_spec(kind).command_args(cfg)


def test_ollama_takes_the_kv_cache_type_from_its_environment_with_flash_attention() -> None:
    spec = get_spec("ollama")
    cfg = replace(BASE, model="llama3.1:8b", kv_cache_dtype="q8_0")
    _, env = spec.native_command(cfg)
    assert env["OLLAMA_KV_CACHE_TYPE"] == "q8_0" and env["OLLAMA_FLASH_ATTENTION"] == "1"
    compose = spec.compose_env(cfg, deployment_id="d", node="n", platform="nvidia")
    assert compose["OLLAMA_KV_CACHE_TYPE"] == "q8_0" and compose["OLLAMA_FLASH_ATTENTION"] == "1"


def test_llamacpp_cpu_compose_file_refuses_options_it_cannot_pass() -> None:
    cfg = replace(BASE, prefix_caching=False)
    with pytest.raises(UnsupportedOption, match="run it natively"):
        get_spec("llamacpp").compose_env(cfg, deployment_id="d", node="n", platform="cpu")


@pytest.mark.parametrize(
    ("field", "value"),
    [("prefix_caching", "no"), ("max_batched_tokens", 0), ("kv_cache_dtype", "fp8; rm")],
)
def test_malformed_options_are_refused_before_any_engine_sees_them(field: str, value: Any) -> None:
    with pytest.raises(ValueError, match=field):
        LaunchConfig(model="m", **{field: value})


def test_run_options_keep_what_was_set_and_read_as_words() -> None:
    config = {
        "model": "m",
        "port": 8000,
        "tensor_parallel": 1,
        "prefix_caching": False,
        "kv_cache_dtype": "fp8",
        "max_num_seqs": 64,
        "api_key": "<redacted>",
    }
    options = run_options(config)
    assert options == {"prefix_caching": False, "kv_cache_dtype": "fp8", "max_num_seqs": 64}
    assert options_text(options) == "prefix caching off, KV fp8, max seqs 64"
    assert options_text({}) == ""
