"""``/tokenize`` as the imitated engine answers it, in the simulator's tokens.

The engines whose catalog entry names a tokenize route (``EngineSpec.tokenize``) answer it
in their own shape; the load generator sizes prompts with it (``loadgen.sizing``), so
against the simulator a prompt of L tokens holds L of the simulator's tokens, as against
the real engine it holds L of the model's:

- llama.cpp (tools/server/server.cpp): ``{content, add_special, with_pieces}`` ->
  ``{"tokens": [id, ...]}`` (``[{"id", "piece"}, ...]`` with pieces);
- vLLM (entrypoints/openai/serving_tokenization.py) and SGLang
  (srt/entrypoints/openai/serving_tokenize.py): ``{model, prompt, add_special_tokens}``
  -> ``{"count", "max_model_len", "tokens", "token_strs"}``;
- TGI (router/src/server.rs): ``{inputs}`` -> ``[{"id", "text", "start", "stop"}, ...]``.

The simulator adds no BOS token to a prompt (its usage counts the prompt's text tokens
and, for chat, its template markers), so "add special tokens" adds nothing here either.
"""

from __future__ import annotations

import zlib
from typing import Any

from engines.catalog.types import TokenizeRoute
from sim.openai_api import BadRequest, json_object
from sim.profile import SimProfile
from sim.textgen import TOKEN_RE

VOCAB_SIZE = 32_000
"""Token ids are a stable hash of the token's text into a Llama-2-sized vocabulary."""


def token_id(piece: str) -> int:
    return zlib.crc32(piece.encode()) % VOCAB_SIZE


def tokenize_answer(route: TokenizeRoute, raw: bytes, profile: SimProfile) -> Any:
    """The engine's answer to a tokenize request (BadRequest for a body it would refuse;
    its status 404 for a model the engine does not serve)."""
    body = json_object(raw)
    text = body.get(route.text_field)
    if not isinstance(text, str):
        raise BadRequest(f"'{route.text_field}' must be a string")
    model = body.get("model")
    if route.sends_model and model is not None and model != profile.model:
        raise BadRequest(f"The model `{model}` does not exist.", 404)
    spans = [(m.group(), m.start(), m.end()) for m in TOKEN_RE.finditer(text)]
    ids = [token_id(piece) for piece, _, _ in spans]
    if route.answer == "list":
        return [{"id": i, "text": piece, "start": start, "stop": stop}
                for i, (piece, start, stop) in zip(ids, spans, strict=True)]  # fmt: skip
    if route.answer == "count":
        strs = [piece for piece, _, _ in spans] if body.get("return_token_strs") else None
        return {"count": len(ids), "max_model_len": profile.max_model_len, "tokens": ids,
                "token_strs": strs}  # fmt: skip
    if body.get("with_pieces"):
        pieces = [piece for piece, _, _ in spans]
        return {"tokens": [{"id": i, "piece": s} for i, s in zip(ids, pieces, strict=True)]}
    return {"tokens": ids}
