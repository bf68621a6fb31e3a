"""The JSON introspection endpoints of the imitated engines.

llama.cpp ``/slots``, Ollama ``/api/ps`` and TensorRT-LLM's JSON ``/metrics``
(iteration stats), shaped as ``tests/fixtures`` records them.
"""

from __future__ import annotations

import time
from typing import Any

from sim.metrics import SimMetrics
from sim.profile import SimProfile
from sim.scheduler import Scheduler


def llamacpp_slots(p: SimProfile, s: Scheduler) -> list[dict[str, Any]]:
    """``GET /slots``: one entry per -np slot, shaped as llama-server answers."""
    n_ctx = p.kv_blocks * p.kv_block_size_tokens // p.max_num_seqs
    busy = {v.slot: v for v in s.running_view()}
    slots: list[dict[str, Any]] = []
    for slot in range(p.max_num_seqs):
        entry: dict[str, Any] = {
            "id": slot,
            "n_ctx": n_ctx,
            "speculative": False,
            "is_processing": slot in busy,
        }
        view = busy.get(slot)
        if view is not None:
            entry.update(
                id_task=abs(hash(view.request_id)) % 100000,
                n_prompt_tokens=view.prompt_tokens,
                n_prompt_tokens_processed=view.prompt_tokens - view.cached_tokens,
                n_prompt_tokens_cache=view.cached_tokens,
                params={
                    "n_predict": view.target_tokens,
                    "max_tokens": view.target_tokens,
                    "stream": True,
                },
                next_token=[
                    {
                        "has_next_token": True,
                        "has_new_line": False,
                        "n_remain": view.target_tokens - view.generated,
                        "n_decoded": view.generated,
                    }
                ],
            )
        slots.append(entry)
    return slots


def ollama_ps(p: SimProfile, loaded: bool, *, expires_in_s: float = 300.0) -> dict[str, Any]:
    """``GET /api/ps``: the model while it is loaded; an empty list before."""
    if not loaded:
        return {"models": [], "infer_top_simulated": True}
    size = 5_137_025_024
    expires = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + expires_in_s))
    family = p.model.split(":")[0].rstrip("0123456789.") or "llama"
    return {
        "models": [
            {
                "name": p.model,
                "model": p.model,
                "size": size,
                "digest": "0" * 64,
                "details": {
                    "parent_model": "",
                    "format": "gguf",
                    "family": family,
                    "families": [family],
                    "parameter_size": "8.0B",
                    "quantization_level": "Q4_K_M",
                },
                "expires_at": expires,
                "size_vram": size,
                "context_length": p.max_model_len,
            }
        ],
        "infer_top_simulated": True,
    }


def trtllm_iterations(p: SimProfile, m: SimMetrics, epoch_of: float) -> list[dict[str, Any]]:
    """``GET /metrics`` (JSON): iteration stats since the previous call, then drained."""
    out: list[dict[str, Any]] = []
    while m.iterations:
        it = m.iterations.popleft()
        out.append(
            {
                "gpuMemUsage": 56_401_920_000,
                "inflightBatchingStats": {
                    "numScheduledRequests": it.batch,
                    "numContextRequests": it.context_requests,
                    "numGenRequests": it.batch - it.context_requests,
                    "numPausedRequests": 0,
                    "numCtxTokens": it.prefill_tokens,
                    "microBatchId": 0,
                    "avgNumDecodedTokensPerIter": 1.0,
                },
                "iter": it.iteration,
                "iterLatencyMS": it.latency_s * 1000.0,
                "kvCacheStats": {
                    "maxNumBlocks": p.kv_blocks,
                    "freeNumBlocks": it.kv_free_blocks,
                    "usedNumBlocks": it.kv_used_blocks,
                    "tokensPerBlock": p.kv_block_size_tokens,
                },
                "numActiveRequests": it.batch,
                "numQueuedRequests": it.queued,
                "maxNumActiveRequests": p.max_num_seqs,
                "newActiveRequestsQueueLatencyMS": 0.0,
                "timestamp": time.strftime("%m-%d-%Y %H:%M:%S", time.gmtime(epoch_of + it.end_s)),
                "inferTopSimulated": True,
            }
        )
    return out
