"""Will this model fit? Weights + KV cache against each engine's budgeting rule.

KV bytes per token = 2 (K and V) × layers × kv_heads × head_dim × bytes, with
kv_heads split over tensor-parallel ranks (at least one head per rank).  All
figures are per GPU.  Engines budget memory differently, as each spec's
``memory`` rule (``engines.catalog.MemoryRule``) says:

* a fraction of total memory covering weights, activations and the KV pool
  (vLLM's ``gpu_memory_utilization``, SGLang's and TGI's static fraction);
* a fraction of what is free *after* the weights loaded, all of it KV
  (TensorRT-LLM, LMDeploy);
* no fraction: context cells for every concurrent sequence allocated up front,
  the rest of the card being the limit (llama.cpp ``-c`` / ``-np``, Ollama).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from engines.catalog import LaunchConfig, get_spec
from engines.model_files import LocalModel

GIB = 1024**3
MIB = 1024**2

DTYPE_BYTES: dict[str, float] = {
    "fp32": 4.0,
    "fp16": 2.0,
    "bf16": 2.0,
    "fp8": 1.0,
    "int8": 1.0,
    "q8_0": 8.5 / 8,  # GGUF blocks carry a scale per 32 weights
    "q6_k": 6.5625 / 8,
    "q5_k_m": 5.5 / 8,
    "q4_k_m": 4.85 / 8,
    "q4_0": 4.5 / 8,
    "int4": 0.5,
    "awq": 0.5,
    "gptq": 0.5,
}


@dataclass(frozen=True, slots=True)
class ModelShape:
    name: str
    params_b: float
    """Parameters in billions."""
    layers: int
    kv_heads: int
    head_dim: int
    hidden: int
    attn_heads: int
    max_context: int

    def __post_init__(self) -> None:
        if min(self.layers, self.kv_heads, self.head_dim, self.hidden, self.attn_heads) < 1:
            raise ValueError(f"{self.name}: every dimension must be at least 1")
        if self.params_b <= 0:
            raise ValueError(f"{self.name}: params_b must be positive")


# Shapes from each model's config.json (num_hidden_layers, num_key_value_heads,
# hidden_size / num_attention_heads, max_position_embeddings).
KNOWN_MODELS: dict[str, ModelShape] = {
    m.name: m
    for m in (
        ModelShape("Llama-3.1-8B", 8.03, 32, 8, 128, 4096, 32, 131072),
        ModelShape("Llama-3.1-70B", 70.6, 80, 8, 128, 8192, 64, 131072),
        ModelShape("Llama-2-7B", 6.74, 32, 32, 128, 4096, 32, 4096),
        ModelShape("Qwen2.5-7B", 7.62, 28, 4, 128, 3584, 28, 32768),
        ModelShape("Llama-3.2-3B", 3.21, 28, 8, 128, 3072, 24, 131072),
        ModelShape("Llama-3.2-1B", 1.24, 16, 8, 64, 2048, 32, 131072),
    )
}


def dtype_bytes(dtype: str | float) -> float:
    if isinstance(dtype, int | float):
        if dtype <= 0:
            raise ValueError("bytes per element must be positive")
        return float(dtype)
    try:
        return DTYPE_BYTES[dtype.lower()]
    except KeyError:
        raise KeyError(f"unknown dtype {dtype!r}; known: {', '.join(DTYPE_BYTES)}") from None


def kv_bytes_per_token(shape: ModelShape, dtype_bytes: float, tp: int = 1) -> int:
    """K and V of every layer for one token, on one tensor-parallel rank."""
    if tp < 1:
        raise ValueError("tp must be at least 1")
    heads_per_rank = max(1, shape.kv_heads // tp)
    return math.ceil(2 * shape.layers * heads_per_rank * shape.head_dim * dtype_bytes)


def weights_bytes(shape: ModelShape, dtype: str | float, tp: int = 1, pp: int = 1) -> int:
    """Weights on one GPU when split over tp × pp ranks."""
    return math.ceil(shape.params_b * 1e9 * dtype_bytes(dtype) / (tp * pp))


@dataclass(frozen=True, slots=True)
class FitEstimate:
    weights_bytes: int
    kv_bytes: int
    """KV needed for concurrent_seqs × context_len tokens."""
    total_bytes: int
    """weights + KV + overhead."""
    budget_bytes: int
    """What the engine lets weights + KV (+ overhead) use under its rule."""
    fits: bool
    max_concurrent_at_context: int
    """Full-length sequences the engine's KV pool could hold at once."""
    kv_capacity_tokens: int
    """Tokens the KV pool the engine would allocate can hold."""
    kv_bytes_per_token: int
    notes: tuple[str, ...] = ()


def estimate_fit(
    shape: ModelShape,
    engine_kind: str,
    *,
    context_len: int,
    gpu_mem_total_bytes: int,
    concurrent_seqs: int = 1,
    weight_dtype: str | float = "fp16",
    kv_dtype: str | float = "fp16",
    tp: int = 1,
    pp: int = 1,
    gpu_mem_fraction: float | None = None,
    overhead_bytes: int | None = None,
) -> FitEstimate:
    """Per-GPU fit of ``concurrent_seqs`` sequences of ``context_len`` tokens."""
    if context_len < 1 or concurrent_seqs < 1 or gpu_mem_total_bytes < 1:
        raise ValueError("context_len, concurrent_seqs and gpu_mem_total_bytes must be positive")
    rule = get_spec(engine_kind).memory  # KeyError naming the known engines
    notes: list[str] = []
    if context_len > shape.max_context:
        notes.append(f"context {context_len} exceeds {shape.name}'s {shape.max_context}")
    per_token = kv_bytes_per_token(shape, dtype_bytes(kv_dtype), tp)
    if shape.kv_heads < tp:
        notes.append(f"{shape.kv_heads} KV heads over TP {tp}: heads are replicated")
    weights = weights_bytes(shape, weight_dtype, tp, pp)
    # KV is split by layer over pipeline stages
    per_token = math.ceil(per_token / pp)
    kv = per_token * context_len * concurrent_seqs
    if overhead_bytes is None:
        overhead_bytes = rule.overhead_mib * MIB
        notes.append(f"assumed {rule.overhead_mib} MiB for activations and buffers")
    if rule.fraction is None:
        # no fraction: the cells of every sequence are allocated up front in full,
        # and the rest of the card is the limit
        budget = gpu_mem_total_bytes
        kv_pool = kv
        fits = weights + kv + overhead_bytes <= budget
        free_for_kv = max(budget - weights - overhead_bytes, 0)
        max_conc = free_for_kv // (per_token * context_len)
        notes.append(f"{context_len} cells per sequence × {concurrent_seqs} {rule.concurrency}")
    else:
        fraction = gpu_mem_fraction or rule.fraction
        if rule.fraction_of == "total":
            budget = int(fraction * gpu_mem_total_bytes)
            kv_pool = max(budget - weights - overhead_bytes, 0)
            notes.append(f"{fraction:g} of total memory covers weights + KV")
        else:
            free = max(gpu_mem_total_bytes - weights - overhead_bytes, 0)
            kv_pool = int(fraction * free)
            budget = weights + overhead_bytes + kv_pool
            notes.append(f"{fraction:g} of memory free after weights becomes KV")
        fits = weights + overhead_bytes + kv <= budget
        max_conc = kv_pool // (per_token * context_len)
    if weights + overhead_bytes > gpu_mem_total_bytes:
        notes.append("the weights alone do not fit: raise tp/pp or quantize")
    return FitEstimate(
        weights_bytes=weights,
        kv_bytes=kv,
        total_bytes=weights + kv + overhead_bytes,
        budget_bytes=budget,
        fits=fits,
        max_concurrent_at_context=int(max_conc),
        kv_capacity_tokens=int(kv_pool // per_token),
        kv_bytes_per_token=per_token,
        notes=tuple(notes),
    )


_FILE_DTYPES = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16", "f32": "fp32"}
"""``torch_dtype`` and GGUF file types as ``DTYPE_BYTES`` names."""


@dataclass(frozen=True, slots=True)
class FileShape:
    """A model's shape and weight type as its files state them (the inventory's)."""

    shape: ModelShape
    weight_dtype: str | float
    """A ``DTYPE_BYTES`` name, else the bytes per parameter the files take on disk."""


def shape_from_files(model: LocalModel) -> FileShape | None:
    """The estimator's inputs from a model the node holds; None where its files do not
    state every figure the estimator needs (``model.problem`` says why, if they failed)."""
    a = model.arch
    if a is None:
        return None
    dims = (a.layers, a.kv_heads, a.head_dim, a.hidden_size, a.attention_heads, a.max_context)
    if a.param_count is None or a.param_count < 1 or any(d is None or d < 1 for d in dims):
        return None
    layers, kv_heads, head_dim, hidden, heads, max_context = (int(d or 0) for d in dims)
    shape = ModelShape(
        model.name, a.param_count / 1e9, layers, kv_heads, head_dim, hidden, heads, max_context
    )
    name = (a.dtype or "").lower()
    name = _FILE_DTYPES.get(name, name)
    weight: str | float = name if name in DTYPE_BYTES else model.size_bytes / a.param_count
    return FileShape(shape, weight)


def estimated_kv_capacity(
    kind: str,
    cfg: LaunchConfig,
    gpu_mem_total_bytes: int | None = None,
    files: FileShape | None = None,
    *,
    on_cpu: bool = False,
) -> tuple[int | None, str]:
    """The estimator's KV capacity for this launch (tokens), or None with the reason;
    ``files``: the model's shape from the node's inventory, used over the name table;
    ``on_cpu``: the engine runs without a GPU (a CPU build)."""
    rule = get_spec(kind).memory
    if rule.fraction is None:  # cells allocated up front: context x concurrent sequences
        if cfg.context_len is None:
            return None, "no context_len: the engine takes the model's own"
        return cfg.context_len * (cfg.max_num_seqs or 1), "context_len x sequences"
    if on_cpu:  # a CPU build sizes its KV pool from its own setting (vLLM: KV_CACHE_GIB)
        return None, "the engine runs on the CPU: the fit estimator sizes KV in GPU memory only"
    shape = files.shape if files else KNOWN_MODELS.get(cfg.model.rstrip("/").rsplit("/", 1)[-1])
    if shape is None:
        return None, f"the estimator knows no shape for {cfg.model!r}"
    if not gpu_mem_total_bytes:
        return None, "no GPU memory figure for the engine's GPUs"
    estimate = estimate_fit(
        shape,
        kind,
        context_len=cfg.context_len or shape.max_context,
        gpu_mem_total_bytes=gpu_mem_total_bytes,
        tp=cfg.tensor_parallel,
        pp=cfg.pipeline_parallel,
        gpu_mem_fraction=cfg.gpu_mem_fraction,
        kv_dtype=_KV_DTYPES.get(cfg.kv_cache_dtype or "auto", cfg.kv_cache_dtype or "fp16"),
        weight_dtype=files.weight_dtype if files else "fp16",
    )
    basis = "fit estimator, shape from the model's files" if files else "fit estimator"
    return estimate.kv_capacity_tokens, basis


_KV_DTYPES = {"auto": "fp16", "fp8_e4m3": "fp8", "fp8_e5m2": "fp8", "f16": "fp16", "f32": "fp32"}
"""Engines' KV-cache dtype names (``LaunchConfig.kv_cache_dtype``) as ``DTYPE_BYTES`` names."""
