"""The datacenter engines: vLLM, SGLang, TGI, TensorRT-LLM, LMDeploy.

Flag spellings are those of the pinned images' own argument parsers; metric
names those of the engines' own sources (``tests/fixtures/engines/``).
"""

from __future__ import annotations

from dataclasses import replace

from engines.catalog.flags import choice, integer, number, switch
from engines.catalog.spec import EngineSpec
from engines.catalog.types import LaunchConfig, MemoryRule
from engines.dialects import PromDialect, version_tuple


def opt(flag: str, value: object | None) -> list[str]:
    """``[flag, str(value)]`` when the option is set, else nothing (engine default)."""
    return [] if value is None else [flag, str(value)]


# The rig's vLLM CPU build (scripts/rig-vllm.sh builds it; no registry has it).
RIG_CPU_IMAGE = "infer-top/vllm-cpu:0.32.0-r1"
_DTYPES = ("auto", "half", "float16", "bfloat16", "float", "float32")


_VLLM_KV = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
_VLLM_ITL = ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds")
_VLLM_NAMES = PromDialect(
    kv_usage=_VLLM_KV,
    running=("vllm:num_requests_running",),
    waiting=("vllm:num_requests_waiting",),
    prompt_tokens=("vllm:prompt_tokens_total",),
    generation_tokens=("vllm:generation_tokens_total",),
    preemptions=("vllm:num_preemptions_total",),
    prefix_hit_rate=("vllm:gpu_prefix_cache_hit_rate",),  # V0 only
    prefix_hits=("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total"),
    prefix_queries=("vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total"),
    ttft=("vllm:time_to_first_token_seconds",),
    itl=_VLLM_ITL,
    e2e=("vllm:e2e_request_latency_seconds",),
)


class VllmSpec(EngineSpec):
    kind = "vllm"
    display_name = "vLLM"
    dialect = "vllm"
    image = "vllm/vllm-openai:v0.11.0"
    image_version = "0.11.0"
    jetson_image = "dustynv/vllm:0.8.6-r36.4-cu128-24.04"
    cpu_image = RIG_CPU_IMAGE
    container_port = 8000
    start_timeout_s = 1815.0
    # The API-server module works in every release and in the Jetson image
    # (which has no ENTRYPOINT), unlike the image-specific `vllm serve`.
    entrypoint = ("python3", "-m", "vllm.entrypoints.openai.api_server")
    checks_model_name = True
    exact_length_style = ("max_tokens", "min_tokens", "ignore_eos")
    length_fields = frozenset({"ignore_eos", "min_tokens"})
    kv_log_patterns = (r"GPU KV cache size: ([\d,]+) tokens",)
    # gpu_memory_utilization x total memory holds weights, activations and the KV pool
    memory = MemoryRule(0.9)
    metric_names = _VLLM_NAMES
    api_key_env = "VLLM_API_KEY"  # api_server: `args.api_key or envs.VLLM_API_KEY`
    extra_flags = (
        integer("--seed", low=0, high=(1 << 32) - 1),
        integer("--max-num-batched-tokens", low=1, high=1 << 24),
        # caps the KV cache at this many blocks: a small KV budget on purpose (tests, and
        # to see how a deployment behaves when the cache runs full)
        integer("--num-gpu-blocks-override", low=1, high=1 << 24),
        choice("--block-size", values=("8", "16", "32", "64", "128")),
        number("--swap-space", low=0, high=1024),
        choice("--kv-cache-dtype", values=("auto", "fp8", "fp8_e4m3", "fp8_e5m2")),
        choice("--dtype", values=_DTYPES),
        switch("--enable-prefix-caching"),
        switch("--no-enable-prefix-caching"),
        switch("--enable-chunked-prefill"),
        switch("--no-enable-chunked-prefill"),
        switch("--enforce-eager"),
    )

    def _flags(self, cfg: LaunchConfig, port: int) -> list[str]:
        return [
            "--model", cfg.model,
            "--host", "0.0.0.0",
            "--port", str(port),
            "--tensor-parallel-size", str(cfg.tensor_parallel),
            "--pipeline-parallel-size", str(cfg.pipeline_parallel),
            *opt("--max-model-len", cfg.context_len),
            *opt("--gpu-memory-utilization", cfg.gpu_mem_fraction),
            *opt("--quantization", cfg.quantization),
            *opt("--max-num-seqs", cfg.max_num_seqs),
            *([] if cfg.metrics else ["--disable-log-stats"]),
            *opt("--api-key", cfg.api_key),
        ]  # fmt: skip

    def metric_names_for(self, version: str | None) -> PromDialect | None:
        # 0.9 renamed the KV gauge (old one hidden in 0.10); 0.11 renamed the ITL histogram.
        v = version_tuple(version)
        if v is None:
            return self.metric_names
        (kv_new, kv_old), (itl_new, itl_old) = _VLLM_KV, _VLLM_ITL
        kv = (kv_old,) if v < (0, 9) else (kv_new,) if v >= (0, 10) else _VLLM_KV
        itl = (itl_new,) if v >= (0, 11) else (itl_old,)
        return replace(_VLLM_NAMES, kv_usage=kv, itl=itl)


class SglangSpec(EngineSpec):
    kind = "sglang"
    display_name = "SGLang"
    dialect = "sglang"
    image = "lmsysorg/sglang:v0.5.3-cu126"
    image_version = "0.5.3"
    container_port = 30000
    start_timeout_s = 915.0
    entrypoint = ("python3", "-m", "sglang.launch_server")
    loading_status = 503  # through the warm-up request, once the port opened
    exact_length_style = ("max_tokens", "min_tokens", "ignore_eos")
    length_fields = frozenset({"ignore_eos", "min_tokens"})
    kv_log_patterns = (r"max_total_num_tokens=(\d+)",)
    # the static fraction x total memory covers weights + KV pool
    memory = MemoryRule(0.88)
    metric_names = PromDialect(
        kv_usage=("sglang:token_usage",),
        running=("sglang:num_running_reqs",),
        waiting=("sglang:num_queue_reqs",),
        prompt_tokens=("sglang:prompt_tokens_total",),
        generation_tokens=("sglang:generation_tokens_total",),
        preemptions=("sglang:num_retracted_reqs_total", "sglang:num_retracted_reqs"),
        prefix_hit_rate=("sglang:cache_hit_rate",),
        ttft=("sglang:time_to_first_token_seconds",),
        # current collector.py names ITL properly; older releases called it TPOT
        itl=("sglang:inter_token_latency_seconds", "sglang:time_per_output_token_seconds"),
        e2e=("sglang:e2e_request_latency_seconds",),
    )
    # No api_key_env: server_args.py declares --api-key as a plain argparse option that
    # reads no variable, so the key stays a flag (visible in the host's process list).
    extra_flags = (
        integer("--random-seed", low=0, high=(1 << 32) - 1),
        integer("--chunked-prefill-size", low=-1, high=1 << 24),
        integer("--max-prefill-tokens", low=1, high=1 << 24),
        choice(
            "--schedule-policy", values=("lpm", "random", "fcfs", "dfs-weight", "lof", "priority")
        ),
        number("--schedule-conservativeness", low=0, high=10),
        choice("--kv-cache-dtype", values=("auto", "fp8_e5m2", "fp8_e4m3")),
        choice("--dtype", values=_DTYPES),
        switch("--disable-radix-cache"),
        switch("--disable-cuda-graph"),
        integer("--cuda-graph-max-bs", low=1, high=4096),
    )

    def _flags(self, cfg: LaunchConfig, port: int) -> list[str]:
        return [
            "--model-path", cfg.model,
            "--host", "0.0.0.0",
            "--port", str(port),
            "--tp-size", str(cfg.tensor_parallel),
            "--pp-size", str(cfg.pipeline_parallel),
            *opt("--context-length", cfg.context_len),
            # SGLang's fraction covers weights and KV pool together
            *opt("--mem-fraction-static", cfg.gpu_mem_fraction),
            *opt("--quantization", cfg.quantization),
            *opt("--max-running-requests", cfg.max_num_seqs),
            *(["--enable-metrics"] if cfg.metrics else []),
            *opt("--api-key", cfg.api_key),
        ]  # fmt: skip

    def _loading_503(self, body: bytes | None) -> bool:
        # /health answers 503 until the warm-up request has gone through.
        return True


class TgiSpec(EngineSpec):
    kind = "tgi"
    display_name = "TGI"
    dialect = "tgi"
    image = "ghcr.io/huggingface/text-generation-inference:3.3.4"
    image_version = "3.3.4"
    container_port = 80
    start_timeout_s = 915.0
    entrypoint = ("text-generation-launcher",)
    exact_length_style = None  # no ignore_eos / min_tokens on the OpenAI route
    length_fields = frozenset()
    kv_log_patterns = (r"[Ss]etting max batch total tokens to (\d+)",)
    memory = MemoryRule(1.0)  # --cuda-memory-fraction of total covers weights + KV
    # metrics-exporter-prometheus renders counters without "_total".  TGI has no KV
    # gauge and no TTFT histogram; its per-request mean time per token is the closest
    # it comes to inter-token latency.
    metric_names = PromDialect(
        running=("tgi_batch_current_size",),
        waiting=("tgi_queue_size",),
        prompt_tokens=("tgi_request_input_length_sum",),
        generation_tokens=("tgi_request_generated_tokens_sum",),
        itl=("tgi_request_mean_time_per_token_duration",),
        e2e=("tgi_request_duration",),
    )
    # No api_key_env: the launcher would read API_KEY, but it hands the key on to the
    # router it spawns as "--api-key <key>" (launcher/src/main.rs), so the key shows on
    # a command line either way; it stays our flag.
    extra_flags = (
        integer("--max-input-tokens", low=1, high=1 << 24),
        integer("--max-batch-prefill-tokens", low=1, high=1 << 24),
        integer("--max-batch-total-tokens", low=1, high=1 << 30),
        integer("--max-waiting-tokens", low=0, high=1 << 16),
        number("--waiting-served-ratio", low=0, high=100),
        integer("--max-best-of", low=1, high=64),
        integer("--max-stop-sequences", low=0, high=64),
        choice("--dtype", values=("float16", "bfloat16")),
        switch("--disable-custom-kernels"),
    )

    def _flags(self, cfg: LaunchConfig, port: int) -> list[str]:
        self.unsupported(cfg, "pipeline_parallel")
        return [
            "--model-id", cfg.model,
            "--hostname", "0.0.0.0",
            "--port", str(port),
            "--num-shard", str(cfg.tensor_parallel),
            *opt("--max-total-tokens", cfg.context_len),
            *opt("--cuda-memory-fraction", cfg.gpu_mem_fraction),
            *opt("--quantize", cfg.quantization),
            *opt("--max-concurrent-requests", cfg.max_num_seqs),
            *opt("--api-key", cfg.api_key),
        ]  # fmt: skip


def _trtllm_both(name: str) -> tuple[str, str]:
    # 1.1-era collector had no prefix; 2026 builds prefix everything "trtllm_".
    return (f"trtllm_{name}", name)


class TrtllmSpec(EngineSpec):
    kind = "trtllm"
    display_name = "TensorRT-LLM"
    dialect = "trtllm"
    image = "nvcr.io/nvidia/tensorrt-llm/release:1.0.0"
    image_version = "1.0.0"
    container_port = 8000
    start_timeout_s = 1815.0
    entrypoint = ("trtllm-serve",)
    # /metrics is per-iteration JSON; the Prometheus registry is mounted at
    # /prometheus/metrics.  parse_metrics reads both (it sniffs the payload).
    metrics_path = "/prometheus/metrics"
    json_metrics_path = "/metrics"
    checks_model_name = True
    exact_length_style = ("max_tokens", "min_tokens", "ignore_eos")
    length_fields = frozenset({"ignore_eos", "min_tokens"})
    # --kv_cache_free_gpu_memory_fraction: of what is free after the weights, all KV
    memory = MemoryRule(0.9, "free")
    metric_names = PromDialect(
        kv_usage=("trtllm_kv_cache_utilization",),
        running=("trtllm_num_requests_running",),
        waiting=("trtllm_num_requests_waiting",),
        prompt_tokens=("trtllm_prompt_tokens_total",),
        generation_tokens=("trtllm_generation_tokens_total",),
        prefix_hit_rate=("trtllm_kv_cache_hit_rate",),
        ttft=_trtllm_both("time_to_first_token_seconds"),
        itl=_trtllm_both("time_per_output_token_seconds"),
        e2e=_trtllm_both("e2e_request_latency_seconds"),
    )
    kv_log_patterns = (
        r"for max tokens in paged KV cache \((\d+)\)",
        r"blocks in KV cache primary pool: (\d+)[\s\S]*?tokens per block: (\d+)",
    )
    extra_flags = (
        integer("--max_num_tokens", low=1, high=1 << 24),
        integer("--max_beam_width", low=1, high=64),
    )

    def _flags(self, cfg: LaunchConfig, port: int) -> list[str]:
        # quantization comes from the checkpoint; trtllm-serve has no key option
        self.unsupported(cfg, "quantization", "api_key")
        return [
            cfg.model,
            "--backend", "pytorch",
            "--host", "0.0.0.0",
            "--port", str(port),
            "--tp_size", str(cfg.tensor_parallel),
            "--pp_size", str(cfg.pipeline_parallel),
            *opt("--max_seq_len", cfg.context_len),
            # fraction of the memory still free after the weights loaded
            *opt("--kv_cache_free_gpu_memory_fraction", cfg.gpu_mem_fraction),
            *opt("--max_batch_size", cfg.max_num_seqs),
        ]  # fmt: skip


class LmdeploySpec(EngineSpec):
    kind = "lmdeploy"
    display_name = "LMDeploy"
    dialect = "lmdeploy"
    image = "openmmlab/lmdeploy:v0.10.2-cu12"
    image_version = "0.10.2"
    container_port = 23333
    start_timeout_s = 915.0
    entrypoint = ("lmdeploy", "serve", "api_server")
    checks_model_name = True
    # min_new_tokens lengthens answers, but forcing needs only max_tokens + ignore_eos
    length_fields = frozenset({"ignore_eos", "min_new_tokens"})
    kv_log_patterns = (r"max_block_count\s*=\s*(\d+)[\s\S]*?block_seq_len\s*=\s*(\d+)",)
    # --cache-max-entry-count: of what is free after the weights, all KV
    memory = MemoryRule(0.8, "free")
    metric_names = PromDialect(
        kv_usage=("lmdeploy:gpu_cache_usage_perc",),
        running=("lmdeploy:num_requests_running",),
        waiting=("lmdeploy:num_requests_waiting",),
        prompt_tokens=("lmdeploy:prompt_tokens_total",),
        generation_tokens=("lmdeploy:generation_tokens_total",),
        prefix_hit_rate=("lmdeploy:prefix_cache_hit_rate",),
        ttft=("lmdeploy:time_to_first_token_seconds",),
        itl=("lmdeploy:iter_token_latency", "lmdeploy:inter_token_latency_seconds"),
        e2e=("lmdeploy:e2e_request_latency_seconds",),
    )
    # No api_key_env: --api-keys is a plain argparse option (lmdeploy/cli/utils.py) that
    # reads no variable, so the key stays a flag.
    extra_flags = (
        choice("--backend", values=("turbomind", "pytorch")),
        choice("--dtype", values=("auto", "float16", "bfloat16")),
        integer("--max-prefill-token-num", low=1, high=1 << 24),
        integer("--cache-block-seq-len", low=1, high=1 << 16),
        choice("--quant-policy", values=("0", "4", "8")),
        switch("--enable-prefix-caching"),
    )

    def _flags(self, cfg: LaunchConfig, port: int) -> list[str]:
        self.unsupported(cfg, "pipeline_parallel")
        return [
            cfg.model,
            "--server-name", "0.0.0.0",
            "--server-port", str(port),
            "--tp", str(cfg.tensor_parallel),
            *opt("--session-len", cfg.context_len),
            # fraction of the memory still free after the weights loaded
            *opt("--cache-max-entry-count", cfg.gpu_mem_fraction),
            *opt("--model-format", cfg.quantization),
            *opt("--max-batch-size", cfg.max_num_seqs),
            *(["--enable-metrics"] if cfg.metrics else []),
            *opt("--api-keys", cfg.api_key),
        ]  # fmt: skip
