"""Tokens without a tokenizer: deterministic prompt counts, prefix hashes and output text.

The simulator never loads a model, so a "token" is a word or a punctuation mark
(``\\w+|[^\\w\\s]``) plus a few template tokens per chat message.  Counts are
stable, so ``usage`` is exact against what was streamed, and equal prompt
prefixes give equal KV-block hashes (prefix-cache hits).
"""

from __future__ import annotations

import hashlib
import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sim.profile import SimProfile

TOKEN_RE = re.compile(r"\w+|[^\w\s]")
_WORDS = (
    "the",
    "model",
    "token",
    "cache",
    "batch",
    "engine",
    "latency",
    "stream",
    "queue",
    "block",
    "prefix",
    "decode",
    "prefill",
    "request",
    "server",
    "memory",
    "signal",
    "result",
    "value",
    "system",
    "vector",
    "kernel",
    "layer",
    "tensor",
    "sample",
    "window",
    "metric",
    "node",
)


def text_tokens(text: str) -> list[str]:
    return TOKEN_RE.findall(text)


def chat_prompt_tokens(messages: Sequence[tuple[str, str]]) -> list[str]:
    """Token pieces of a chat prompt: template markers around each (role, content)."""
    tokens: list[str] = []
    for role, content in messages:
        tokens += ["<|start|>", role, "<|sep|>", *text_tokens(content), "<|end|>"]
    tokens += ["<|start|>", "assistant", "<|sep|>"]
    return tokens


def block_hashes(tokens: Sequence[str], block_size: int) -> tuple[int, ...]:
    """Chained hashes of each full block, as paged-attention prefix caches key them."""
    hashes: list[int] = []
    running = hashlib.blake2b(digest_size=8)
    full = len(tokens) // block_size
    for b in range(full):
        running.update("\x1f".join(tokens[b * block_size : (b + 1) * block_size]).encode())
        running.update(b"\x1e")
        hashes.append(int.from_bytes(running.copy().digest(), "big"))
    return tuple(hashes)


@dataclass(frozen=True, slots=True)
class LengthPlan:
    tokens: int
    finish_reason: str
    """``length`` when max_tokens cut it, ``stop`` when the model reached EOS."""


def plan_output(
    profile: SimProfile,
    rng: random.Random,
    *,
    max_tokens: int | None,
    ignore_eos: bool = False,
    min_tokens: Mapping[str, int | None] | None = None,
) -> LengthPlan:
    """How many tokens the imitated engine would produce for these request fields.

    Only the fields the engine honours count (TGI and Ollama ignore ``ignore_eos``;
    vLLM reads ``min_tokens``, LMDeploy ``min_new_tokens``); where the model would
    stop by itself is drawn from the profile's EOS range.
    """
    cap = profile.default_max_tokens if max_tokens is None else max_tokens
    natural = rng.randint(profile.eos_min_tokens, profile.eos_max_tokens)
    controls = profile.spec.length_fields
    if ignore_eos and "ignore_eos" in controls:
        return LengthPlan(cap, "length")
    n = min(natural, cap)
    for key, value in (min_tokens or {}).items():
        if value and key in controls:
            n = max(n, min(value, cap))
    return LengthPlan(n, "length" if n == cap else "stop")


def output_words(seed: int, request_index: int, n: int) -> list[str]:
    """The n token strings of a response, fixed by the seed and the request's index."""
    rng = random.Random(f"{seed}:{request_index}:text")
    return [" " + rng.choice(_WORDS) for _ in range(n)]
