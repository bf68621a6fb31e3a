"""KV-cache capacity (tokens) as a running engine states it; the agent puts it beside
the fit estimator's figure for the same launch (``engines.fit.estimated_kv_capacity``),
so every real start checks the estimator.

Where each engine says it (``EngineSpec.kv_capacity_path``):

* vLLM: ``vllm:cache_config_info`` on /metrics, labels ``num_gpu_blocks`` x ``block_size``;
* SGLang: ``max_total_num_tokens`` in /get_server_info;
* llama.cpp: /props, ``default_generation_settings.n_ctx`` (a slot's cells) x
  ``total_slots`` (the catalog never unifies the slots' KV, so each has its own share);
* TGI: ``max_batch_total_tokens`` in /info.

Engines that state it only in their start-up log use ``EngineSpec.kv_log_patterns``.
"""

from __future__ import annotations

import json
import re
from typing import Any

_VLLM_INFO = re.compile(r"^vllm:cache_config_info\{([^}]*)\}", re.M)
_LABEL = re.compile(r'(\w+)="([^"]*)"')


def _json(payload: str | bytes) -> dict[str, Any] | None:
    try:
        data = json.loads(payload)
    except (ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) else None


def _positive(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    try:
        number = int(float(value))
    except ValueError:
        return None
    return number if number > 0 else None


def vllm_capacity(payload: str | bytes) -> int | None:
    text = payload.decode(errors="replace") if isinstance(payload, bytes) else payload
    match = _VLLM_INFO.search(text)
    if match is None:
        return None
    labels = dict(_LABEL.findall(match.group(1)))
    blocks, size = _positive(labels.get("num_gpu_blocks")), _positive(labels.get("block_size"))
    return None if blocks is None or size is None else blocks * size


def sglang_capacity(payload: str | bytes) -> int | None:
    data = _json(payload)
    if data is None:
        return None
    # scheduler info is merged into the answer; newer releases nest it per data-parallel rank
    states = data.get("internal_states")
    nested = (
        states[0] if isinstance(states, list) and states and isinstance(states[0], dict) else {}
    )
    return _positive(data.get("max_total_num_tokens", nested.get("max_total_num_tokens")))


def llamacpp_capacity(payload: str | bytes) -> int | None:
    data = _json(payload)
    if data is None:
        return None
    settings = data.get("default_generation_settings")
    per_slot = _positive(settings.get("n_ctx")) if isinstance(settings, dict) else None
    slots = _positive(data.get("total_slots"))
    return None if per_slot is None or slots is None else per_slot * slots


def tgi_capacity(payload: str | bytes) -> int | None:
    data = _json(payload)
    if data is None:
        return None
    found = _positive(data.get("max_batch_total_tokens"))
    if found is None:  # v3 routers nest the backend's figures
        nested = [v for v in data.values() if isinstance(v, dict)]
        found = next((n for v in nested if (n := _positive(v.get("max_batch_total_tokens")))), None)
    return found
