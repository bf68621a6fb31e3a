"""The Engines screen's start form: its typed start options reach the launch config the
agent gets, and a started engine's KV check reads beside the estimate (Textual-free)."""

from __future__ import annotations

import pytest

from agents.protocol import KvCapacity
from control.engine_ops import kv_check_text, typed_options
from tui.screens.engine import launch_config


def test_the_form_sends_typed_options_and_leaves_defaults_out() -> None:
    options = typed_options(
        prefix_caching="off", chunked_prefill="default", kv_cache_dtype=" fp8 ",
        max_batched_tokens="2048", prefill_chunk_tokens="",
    )  # fmt: skip
    config = launch_config("vllm", "m", "", "", options)
    assert config == {
        "model": "m", "prefix_caching": False, "kv_cache_dtype": "fp8", "max_batched_tokens": 2048,
    }  # fmt: skip
    assert typed_options() == {}
    with pytest.raises(ValueError, match="max_batched_tokens must be a whole number"):
        typed_options(max_batched_tokens="lots")


def test_the_kv_check_reads_beside_the_estimate() -> None:
    kv = KvCapacity(768, 300, 468, "/props", "context_len x sequences")
    assert kv_check_text(kv) == (
        "KV capacity 768 tokens (/props), estimate 300 tokens (context_len x sequences), "
        "difference +468"
    )
    unknown = KvCapacity(None, 300, None, "Ollama states no KV capacity", "context_len x sequences")
    assert kv_check_text(unknown).startswith("KV capacity n/a (Ollama states no KV capacity)")
    assert kv_check_text(None) == ""
