"""The catalog's vocabulary: launch config, health states, memory rules."""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Literal


class Health(StrEnum):
    LOADING = "loading"
    READY = "ready"
    DEAD = "dead"
    UNHEALTHY = "unhealthy"
    OVERLOADED = "overloaded"
    """Was ready, and now its health route says it is too busy to answer (SGLang's 503)."""


Platform = Literal["nvidia", "jetson", "cpu"]
PLATFORMS: tuple[str, ...] = ("nvidia", "jetson", "cpu")
MetricsFormat = Literal["prometheus", "json", "ollama_ps"]
SecondPageFormat = Literal["prometheus", "llamacpp_slots"]


class UnsupportedOption(ValueError):
    """A launch option the engine has no way to honour (e.g. TGI pipeline parallel)."""


@dataclass(frozen=True, slots=True)
class TokenizeRoute:
    """How an engine tokenizes text over HTTP (no special tokens added): the load
    generator sizes its prompts in the engine's own tokens with it."""

    path: str
    """POSTed to, at the engine's root."""
    text_field: str
    """The body field that takes the text."""
    answer: str
    """Where the answer holds the count: the key of a token list ("tokens") or of a number
    ("count", Ollama's "prompt_eval_count"), or "list" where the answer is the list of
    tokens."""
    sends_model: bool = False
    """The body names the model (``model``)."""
    fields: tuple[tuple[str, object], ...] = ()
    """Further body fields, e.g. not to add a BOS token."""

    def body(self, text: str, model: str) -> dict[str, object]:
        body: dict[str, object] = {self.text_field: text, **dict(self.fields)}
        if self.sends_model:
            body["model"] = model
        return body

    def count(self, answer: object) -> int | None:
        """Tokens in ``answer``; None when it is not what this route answers."""
        found = answer.get(self.answer) if isinstance(answer, dict) else answer
        if isinstance(found, list):
            return len(found)
        return found if isinstance(found, int) and not isinstance(found, bool) else None


@dataclass(frozen=True, slots=True)
class ContextRoute:
    """Where a running engine states its context: the most tokens one request may hold,
    prompt and output together (the load generator's pre-flight refuses a run whose
    requests cannot fit, rather than send them to be refused or cut short)."""

    path: str
    """GET at the engine's root; answers JSON."""
    keys: tuple[str, ...]
    """The keys down to the number."""
    per_model: bool = False
    """The answer is ``/v1/models``'s list: the number is on the served model's entry."""

    def read(self, answer: object, model: str) -> int | None:
        """The context in ``answer`` (``model``'s, where it lists models); None where the
        answer does not say."""
        found: object = answer
        if self.per_model:
            listed = answer.get("data") if isinstance(answer, dict) else None
            found = next(
                (m for m in listed or () if isinstance(m, dict) and m.get("id") == model), None
            )
        for key in self.keys:
            found = found.get(key) if isinstance(found, dict) else None
        if isinstance(found, bool) or not isinstance(found, int) or found < 1:
            return None
        return found

    def describe(self) -> str:
        return f"{'.'.join(self.keys)} in {self.path}"


@dataclass(frozen=True, slots=True)
class MemoryRule:
    """How an engine budgets GPU memory for weights and KV cache (``engines.fit`` reads it)."""

    fraction: float | None
    """The engine's default memory fraction; None where it takes none and allocates its
    context cells up front, the rest of the card being the limit (llama.cpp, Ollama)."""
    fraction_of: Literal["total", "free"] = "total"
    """What the fraction is of: all memory, covering weights + KV (vLLM, SGLang, TGI), or
    what is free once the weights loaded, all of it becoming KV (TensorRT-LLM, LMDeploy)."""
    overhead_mib: int = 1024
    """Activations, CUDA graphs and compute buffers: a rule of thumb."""
    concurrency: str = "max_num_seqs"
    """How the operator sets the number of concurrent sequences (named in the estimate's notes)."""


@dataclass(frozen=True, slots=True)
class LaunchConfig:
    """What an operator asks of an engine, independent of its flag spelling.

    ``port`` is where clients reach the engine: the process's own port when it
    runs bare, the host port when it runs under Compose (inside the container
    the engine then listens on its spec's ``container_port``).
    """

    model: str
    port: int = 8000
    tensor_parallel: int = 1
    pipeline_parallel: int = 1
    context_len: int | None = None
    gpu_mem_fraction: float | None = None
    quantization: str | None = None
    max_num_seqs: int | None = None
    prefix_caching: bool | None = None
    """Typed optimisation switches (None: the engine's default), spelled per engine by
    its spec's ``switches`` (``engines.catalog.options``); an engine without one refuses."""
    chunked_prefill: bool | None = None
    prefill_chunk_tokens: int | None = None
    """The token budget of one prefill chunk."""
    max_batched_tokens: int | None = None
    """The tokens one scheduler step may process (prefill and decode together)."""
    kv_cache_dtype: str | None = None
    """In the engine's own vocabulary (vLLM ``fp8``, llama.cpp ``q8_0``...)."""
    metrics: bool = True
    api_key: str | None = None
    gpu_ids: tuple[int, ...] = ()
    image: str | None = None
    """Overrides the spec's image (e.g. a pinned or locally built tag)."""
    extra_args: tuple[str, ...] = ()
    """Tuning flags the engine's spec allows (``EngineSpec.extra_flags``), appended
    after the rendered ones."""

    def __post_init__(self) -> None:
        # Types first: a launch config arrives as JSON, and a value check on the wrong
        # type would answer with a Python error instead of what to send.
        if problems := _type_problems(self):
            raise ValueError("invalid LaunchConfig: " + "; ".join(problems))
        problems = []
        if not self.model:
            problems.append("model must not be empty")
        texts = {"model": self.model, "api_key": self.api_key or ""}
        texts |= {f"extra_args[{i}]": a for i, a in enumerate(self.extra_args)}
        for name, text in texts.items():
            if any(ord(c) < 32 or c == "\x7f" for c in text):
                problems.append(f"{name} contains control characters")
        if not 1 <= self.port <= 65535:
            problems.append(f"port {self.port} is not in 1..65535")
        for name in ("tensor_parallel", "pipeline_parallel"):
            if getattr(self, name) < 1:
                problems.append(f"{name} must be at least 1")
        for name in ("context_len", "max_num_seqs", "prefill_chunk_tokens", "max_batched_tokens"):
            value = getattr(self, name)
            if value is not None and value < 1:
                problems.append(f"{name} must be at least 1 when given")
        if self.gpu_mem_fraction is not None and not 0.0 < self.gpu_mem_fraction <= 1.0:
            problems.append(f"gpu_mem_fraction {self.gpu_mem_fraction} is not in (0, 1]")
        if any(i < 0 for i in self.gpu_ids):
            problems.append("gpu_ids must be non-negative")
        for name in ("quantization", "kv_cache_dtype"):
            value = getattr(self, name)
            if value is not None and not _TOKEN.fullmatch(value):
                problems.append(f"{name} {value!r} is not a plain name")
        if problems:
            raise ValueError("invalid LaunchConfig: " + "; ".join(problems))

    @property
    def gpus_needed(self) -> int:
        return self.tensor_parallel * self.pipeline_parallel


_TOKEN = re.compile(r"[A-Za-z0-9_.+-]+")
_FIELD_TYPES: dict[str, tuple[str, type | tuple[type, ...], bool]] = {
    # field: (what to send, accepted types, None allowed)
    "model": ("a string", str, False),
    "port": ("an integer", int, False),
    "tensor_parallel": ("an integer", int, False),
    "pipeline_parallel": ("an integer", int, False),
    "context_len": ("an integer", int, True),
    "gpu_mem_fraction": ("a number", (int, float), True),
    "quantization": ("a string", str, True),
    "max_num_seqs": ("an integer", int, True),
    "prefix_caching": ("true or false", bool, True),
    "chunked_prefill": ("true or false", bool, True),
    "prefill_chunk_tokens": ("an integer", int, True),
    "max_batched_tokens": ("an integer", int, True),
    "kv_cache_dtype": ("a string", str, True),
    "metrics": ("true or false", bool, False),
    "api_key": ("a string", str, True),
    "image": ("a string", str, True),
}


def _type_problems(cfg: LaunchConfig) -> list[str]:
    problems = []
    for name, (what, types, optional) in _FIELD_TYPES.items():
        value = getattr(cfg, name)
        if value is None and optional:
            continue
        # bool is an int to Python, never a count or a port to an operator
        if not isinstance(value, types) or (isinstance(value, bool) and types is not bool):
            problems.append(f"{name} must be {what}, not {type(value).__name__}")
    for name, what, item in (
        ("gpu_ids", "GPU indices (integers)", int),
        ("extra_args", "strings", str),
    ):
        values = getattr(cfg, name)
        if not isinstance(values, tuple) or not all(
            isinstance(v, item) and not isinstance(v, bool) for v in values
        ):
            problems.append(f"{name} must be a list of {what}")
    return problems
