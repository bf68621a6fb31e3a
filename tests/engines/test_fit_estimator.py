"""The fit estimator: the seed example exactly, and each engine's budgeting rule."""

from __future__ import annotations

from pathlib import Path

import pytest

from engines.catalog import get_spec
from engines.fit import (
    GIB,
    KNOWN_MODELS,
    MIB,
    ModelShape,
    estimate_fit,
    kv_bytes_per_token,
    weights_bytes,
)

LLAMA8 = KNOWN_MODELS["Llama-3.1-8B"]


def test_seed_example_llama31_8b_4096_tokens_fp16_is_512_mib() -> None:
    assert (LLAMA8.layers, LLAMA8.kv_heads, LLAMA8.head_dim) == (32, 8, 128)
    assert kv_bytes_per_token(LLAMA8, 2) * 4096 == 512 * MIB
    est = estimate_fit(LLAMA8, "vllm", context_len=4096, gpu_mem_total_bytes=80 * GIB)
    assert est.kv_bytes == 512 * MIB


def test_kv_heads_split_over_tp_but_never_below_one() -> None:
    assert kv_bytes_per_token(LLAMA8, 2, tp=2) == kv_bytes_per_token(LLAMA8, 2) // 2
    assert kv_bytes_per_token(LLAMA8, 2, tp=8) == 2 * 32 * 1 * 128 * 2
    assert kv_bytes_per_token(LLAMA8, 2, tp=16) == kv_bytes_per_token(LLAMA8, 2, tp=8)
    # Llama-2-7B has full multi-head attention: 4x the KV of Llama-3.1-8B
    assert kv_bytes_per_token(KNOWN_MODELS["Llama-2-7B"], 2) == 4 * kv_bytes_per_token(LLAMA8, 2)


def test_known_models_include_an_edge_model() -> None:
    assert {"Llama-3.1-8B", "Llama-3.1-70B", "Llama-2-7B", "Qwen2.5-7B"} <= set(KNOWN_MODELS)
    assert any(1 <= m.params_b <= 4 for m in KNOWN_MODELS.values())


def test_weights_by_dtype() -> None:
    assert weights_bytes(LLAMA8, "bf16") == round(8.03e9 * 2)
    assert weights_bytes(LLAMA8, "fp8") == round(8.03e9)
    assert weights_bytes(LLAMA8, "int4", tp=2) == round(8.03e9 * 0.5 / 2)
    with pytest.raises(KeyError, match="known: fp32"):
        weights_bytes(LLAMA8, "fp7")


def test_70b_needs_tensor_parallel_on_80_gb() -> None:
    big = KNOWN_MODELS["Llama-3.1-70B"]
    one = estimate_fit(big, "vllm", context_len=8192, gpu_mem_total_bytes=80 * GIB)
    assert not one.fits and any("weights alone" in n for n in one.notes)
    four = estimate_fit(big, "vllm", context_len=8192, gpu_mem_total_bytes=80 * GIB, tp=4)
    assert four.fits and four.max_concurrent_at_context > 1


def test_each_engine_budgets_differently() -> None:
    common = {"context_len": 4096, "gpu_mem_total_bytes": 80 * GIB, "overhead_bytes": 0}
    w = weights_bytes(LLAMA8, "fp16")
    vllm = estimate_fit(LLAMA8, "vllm", gpu_mem_fraction=0.5, **common)
    assert vllm.budget_bytes == int(0.5 * 80 * GIB)  # fraction of total
    assert vllm.kv_capacity_tokens == (int(0.5 * 80 * GIB) - w) // (128 * 1024)
    sglang = estimate_fit(LLAMA8, "sglang", gpu_mem_fraction=0.5, **common)
    assert sglang.budget_bytes == vllm.budget_bytes  # fraction covers weights + KV
    trt = estimate_fit(LLAMA8, "trtllm", gpu_mem_fraction=0.5, **common)
    assert trt.budget_bytes == w + int(0.5 * (80 * GIB - w))  # fraction of free after weights
    assert trt.kv_capacity_tokens > vllm.kv_capacity_tokens
    lmd = estimate_fit(LLAMA8, "lmdeploy", gpu_mem_fraction=0.5, **common)
    assert lmd.budget_bytes == trt.budget_bytes


def test_llamacpp_cells_are_split_over_slots() -> None:
    est = estimate_fit(
        LLAMA8, "llamacpp", context_len=2048, concurrent_seqs=64,
        gpu_mem_total_bytes=141 * GIB, weight_dtype="q4_k_m",
    )  # fmt: skip
    assert est.kv_capacity_tokens == 64 * 2048
    assert est.kv_bytes == 64 * 2048 * 128 * 1024
    assert est.fits
    too_many = estimate_fit(
        LLAMA8, "ollama", context_len=131072, concurrent_seqs=8, gpu_mem_total_bytes=24 * GIB
    )
    assert not too_many.fits  # context x parallel cells are allocated up front


def test_estimate_versus_the_real_llama_server_log() -> None:
    log = (Path(__file__).resolve().parents[1] / "fixtures" / "h200-llamacpp"
           / "server-startup.log").read_text()  # fmt: skip
    reported = get_spec("llamacpp").kv_capacity_from_log(log)
    est = estimate_fit(
        KNOWN_MODELS["Llama-3.2-1B"], "llamacpp", context_len=2048, concurrent_seqs=64,
        gpu_mem_total_bytes=141 * GIB,
    )  # fmt: skip
    assert est.kv_capacity_tokens == reported == 131_072


def test_invalid_shapes_and_inputs_are_refused() -> None:
    with pytest.raises(ValueError):
        ModelShape("broken", 1.0, 0, 8, 128, 4096, 32, 4096)
    with pytest.raises(ValueError):
        estimate_fit(LLAMA8, "vllm", context_len=0, gpu_mem_total_bytes=GIB)
    with pytest.raises(KeyError, match="unknown engine kind 'triton'; known: vllm"):
        estimate_fit(LLAMA8, "triton", context_len=10, gpu_mem_total_bytes=GIB)
