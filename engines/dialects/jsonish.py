"""The two engines whose telemetry is JSON, not Prometheus text.

* TensorRT-LLM ``GET /metrics``: a list of per-iteration stats (the executor's
  ``IterationStats`` serialised by trtllm-serve); the newest entry counts.
* Ollama ``GET /api/ps``: loaded models and their memory; no request counters
  at all (token counts only arrive in each response's final object).
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from engines.dialects.prom import MetricsParseError, as_float, decode_payload, get_path
from engines.sample import EngineSample


def _load_json(payload: str | bytes, what: str) -> object:
    text = decode_payload(payload, what=what)
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise MetricsParseError(f"{what}: not JSON ({exc})") from exc


def parse_trtllm_iteration_stats(
    payload: str | bytes, *, engine: str, version: str | None = None
) -> EngineSample:
    what = f"{engine} /metrics JSON"
    data = _load_json(payload, what)
    if isinstance(data, Mapping):
        data = [data]
    if not isinstance(data, list):
        raise MetricsParseError(f"{what}: expected a list of iteration stats")
    if not data:
        # No iteration ran since the last poll (the endpoint drains a queue):
        # that is "nothing measured", not an error and not zero.
        return EngineSample(engine=engine, engine_version=version)
    last = data[-1]
    if not isinstance(last, Mapping):
        raise MetricsParseError(f"{what}: iteration entry is {type(last).__name__}, not an object")
    raw: dict[str, float] = {}
    for key, value in last.items():
        if isinstance(value, Mapping):
            for sub, subvalue in value.items():
                if (number := as_float(subvalue)) is not None:
                    raw[f"{key}.{sub}"] = number
        elif (number := as_float(value)) is not None:
            raw[str(key)] = number
    used = as_float(get_path(last, "kvCacheStats", "usedNumBlocks"))
    total = as_float(get_path(last, "kvCacheStats", "maxNumBlocks"))
    kv = used / total if used is not None and total else None
    hit = as_float(get_path(last, "kvCacheStats", "cacheHitRate"))
    return EngineSample(
        engine=engine,
        kv_cache_usage=None if kv is None else min(max(kv, 0.0), 1.0),
        requests_running=as_float(last.get("numActiveRequests")),
        requests_waiting=as_float(last.get("numQueuedRequests")),
        prefix_cache_hit_rate=None if hit is None else min(max(hit, 0.0), 1.0),
        engine_version=version,
        raw=raw,
    )


def parse_ollama_ps(
    payload: str | bytes, *, engine: str, version: str | None = None
) -> EngineSample:
    what = f"{engine} /api/ps"
    data = _load_json(payload, what)
    models = get_path(data, "models")
    if not isinstance(models, list):
        raise MetricsParseError(f"{what}: expected an object with a 'models' list")
    raw: dict[str, float] = {"models_loaded": float(len(models))}
    vram = size = 0.0
    for model in models:
        if not isinstance(model, Mapping):
            raise MetricsParseError(f"{what}: model entry is {type(model).__name__}")
        name = str(model.get("name", "?"))
        for field in ("size", "size_vram", "context_length"):
            if (number := as_float(model.get(field))) is not None:
                raw[f'{field}{{model="{name}"}}'] = number
        vram += as_float(model.get("size_vram")) or 0.0
        size += as_float(model.get("size")) or 0.0
    raw["size_vram_bytes"] = vram
    raw["size_bytes"] = size
    # Ollama reports no queue, no running count and no KV use: all stay None.
    return EngineSample(engine=engine, engine_version=version, raw=raw)


def ollama_response_counts(payload: str | bytes) -> tuple[int, int] | None:
    """(prompt_eval_count, eval_count) from a final /api/generate or /api/chat
    object; None when the object is not a final one or lacks the counts."""
    data = _load_json(payload, "ollama response")
    if get_path(data, "done") is not True:
        return None
    prompt, out = get_path(data, "prompt_eval_count"), get_path(data, "eval_count")
    if isinstance(prompt, int) and isinstance(out, int) and not isinstance(out, bool):
        return prompt, out
    return None
