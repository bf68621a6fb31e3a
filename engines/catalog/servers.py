"""The datacenter engines: vLLM, SGLang, TGI, TensorRT-LLM, LMDeploy.

Flag spellings are those of the pinned images' own argument parsers; metric
names those of the engines' own sources (``tests/fixtures/engines/``).
"""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType

from engines.catalog.flags import choice, integer, number, switch
from engines.catalog.options import toggle, valued
from engines.catalog.spec import EngineSpec
from engines.catalog.types import (
    ContextRoute,
    LaunchConfig,
    MemoryRule,
    TokenizeRoute,
    UnsupportedOption,
)
from engines.dialects import PromDialect, version_tuple
from engines.kv_capacity import sglang_capacity, tgi_capacity, vllm_capacity
from engines.sample import EngineSample, gaps_filled


def opt(flag: str, value: object | None) -> list[str]:
    """``[flag, str(value)]`` when the option is set, else nothing (engine default)."""
    return [] if value is None else [flag, str(value)]


# The rig's vLLM CPU build (scripts/rig-vllm.sh builds it; no registry has it).
RIG_CPU_IMAGE = "infer-top/vllm-cpu:0.32.0-r1"
_DTYPES = ("auto", "half", "float16", "bfloat16", "float", "float32")
# argparse choices of the pinned releases, which refuse anything else at start-up:
# sglang 0.5.3 srt/server_args.py QUANTIZATION_CHOICES; lmdeploy v0.10.2 cli/utils.py
# ArgumentHelper.model_format.
_SGLANG_QUANTIZATIONS = (
    "awq", "fp8", "gptq", "marlin", "gptq_marlin", "awq_marlin", "bitsandbytes", "gguf",
    "modelopt", "modelopt_fp4", "petit_nvfp4", "w8a8_int8", "w8a8_fp8", "moe_wna16", "qoq",
    "w4afp8", "mxfp4",
)  # fmt: skip
_LMDEPLOY_MODEL_FORMATS = ("hf", "awq", "gptq", "fp8", "mxfp4")


def checked_choice(
    spec: EngineSpec, option: str, value: str | None, choices: tuple[str, ...]
) -> None:
    """Refuse a value the engine's own argument parser would refuse (it would exit at start)."""
    if value is not None and value not in choices:
        raise UnsupportedOption(
            f"{spec.display_name} takes {option} {', '.join(choices)}; not {value!r}"
        )


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

_OPENAI_TOKENIZE = TokenizeRoute(
    "/tokenize", "prompt", "count", sends_model=True, fields=(("add_special_tokens", False),)
)


class VllmSpec(EngineSpec):
    kind = "vllm"
    display_name = "vLLM"
    dialect = "vllm"
    image = "vllm/vllm-openai:v0.11.0"
    image_version = "0.11.0"
    jetson_image = "dustynv/vllm:0.8.6-r36.4-cu128-24.04"
    jetson_image_version = "0.8.6"
    version_path = "/version"  # entrypoints/openai/api_server.py: {"version": VLLM_VERSION}
    cpu_image = RIG_CPU_IMAGE
    container_port = 8000
    start_timeout_s = 1815.0
    # The API-server module works in every release and in the Jetson image
    # (which has no ENTRYPOINT), unlike the image-specific `vllm serve`.
    entrypoint = ("python3", "-m", "vllm.entrypoints.openai.api_server")
    checks_model_name = True
    exact_length_style = ("max_tokens", "min_tokens", "ignore_eos")
    length_fields = frozenset({"ignore_eos", "min_tokens"})
    models_owned_by = "vllm"  # entrypoints/openai/protocol.py ModelCard
    # ModelCard.max_model_len: a request whose prompt + max_tokens exceed it is a 400
    context_route = ContextRoute("/v1/models", ("max_model_len",), per_model=True)
    # entrypoints/openai/serving_tokenization.py: {model, prompt, add_special_tokens}
    # -> {count, tokens, max_model_len}
    tokenize = _OPENAI_TOKENIZE
    kv_log_patterns = (r"GPU KV cache size: ([\d,]+) tokens",)
    kv_capacity_path = "/metrics"  # vllm:cache_config_info
    # gpu_memory_utilization x total memory holds weights, activations and the KV pool
    memory = MemoryRule(0.9)
    metric_names = _VLLM_NAMES
    api_key_env = "VLLM_API_KEY"  # api_server: `args.api_key or envs.VLLM_API_KEY`
    extra_flags = (
        integer("--seed", low=0, high=(1 << 32) - 1),
        # caps the KV cache at this many blocks: a small KV budget on purpose (tests, and
        # to see how a deployment behaves when the cache runs full)
        integer("--num-gpu-blocks-override", low=1, high=1 << 24),
        choice("--block-size", values=("8", "16", "32", "64", "128")),
        number("--swap-space", low=0, high=1024),
        choice("--dtype", values=_DTYPES),
        switch("--enforce-eager"),
    )
    # engine/arg_utils.py: EngineArgs' bool fields become BooleanOptionalAction flags
    # (--x / --no-x); CacheConfig.cache_dtype's CacheDType literal lists the KV dtypes.
    switches = MappingProxyType(
        {
            "prefix_caching": toggle(("--enable-prefix-caching",), ("--no-enable-prefix-caching",)),
            "chunked_prefill": toggle(
                ("--enable-chunked-prefill",), ("--no-enable-chunked-prefill",)
            ),
            "max_batched_tokens": valued("--max-num-batched-tokens"),
            "kv_cache_dtype": valued(
                "--kv-cache-dtype", values=("auto", "fp8", "fp8_e4m3", "fp8_e5m2")
            ),
            # no prefill_chunk_tokens: vLLM chunks prefills within max_batched_tokens
        }
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

    def kv_capacity(self, payload: str | bytes) -> int | None:
        return vllm_capacity(payload)

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
    version_path = "/get_server_info"  # http_server.py: server args, ..., "version"
    container_port = 30000
    start_timeout_s = 915.0
    entrypoint = ("python3", "-m", "sglang.launch_server")
    # http_server.py health_generate (v0.5.3): 503 while ServerStatus.Starting (through the
    # warm-up request, once the port opened); once Up, 503 again when its one-token probe
    # got no answer within HEALTH_CHECK_TIMEOUT: too busy, not loading.
    loading_status = 503
    busy_status = 503
    exact_length_style = ("max_tokens", "min_tokens", "ignore_eos")
    length_fields = frozenset({"ignore_eos", "min_tokens"})
    models_owned_by = "sglang"  # srt/entrypoints/openai/protocol.py ModelCard
    # srt/entrypoints/openai/serving_tokenize.py: vLLM's request and answer
    tokenize = _OPENAI_TOKENIZE
    kv_log_patterns = (r"max_total_num_tokens=(\d+)",)
    kv_capacity_path = "/get_server_info"
    # the static fraction x total memory covers weights + KV pool
    memory = MemoryRule(0.88)
    metric_names = PromDialect(
        kv_usage=("sglang:token_usage",),
        running=("sglang:num_running_reqs",),
        waiting=("sglang:num_queue_reqs",),
        prompt_tokens=("sglang:prompt_tokens_total",),
        generation_tokens=("sglang:generation_tokens_total",),
        # The counter came with 0.5.7 (metrics/collector.py); before it, and beside it,
        # "sglang:num_retracted_reqs" is a gauge of the last interval's retractions, no total:
        # an engine without the counter reports no preemption total (n/a, never that gauge).
        preemptions=("sglang:num_retracted_requests_total",),
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
        choice(
            "--schedule-policy", values=("lpm", "random", "fcfs", "dfs-weight", "lof", "priority")
        ),
        number("--schedule-conservativeness", low=0, high=10),
        choice("--dtype", values=_DTYPES),
        switch("--disable-cuda-graph"),
        integer("--cuda-graph-max-bs", low=1, high=4096),
    )
    # srt/server_args.py: the radix (prefix) cache and chunked prefill are on by default;
    # --chunked-prefill-size -1 turns chunking off; --max-prefill-tokens bounds the prefill
    # tokens of one step (decode steps are bounded by --max-running-requests).
    switches = MappingProxyType(
        {
            "prefix_caching": toggle((), ("--disable-radix-cache",)),
            "chunked_prefill": toggle((), ("--chunked-prefill-size", "-1")),
            "prefill_chunk_tokens": valued("--chunked-prefill-size"),
            "max_batched_tokens": valued("--max-prefill-tokens"),
            "kv_cache_dtype": valued("--kv-cache-dtype", values=("auto", "fp8_e5m2", "fp8_e4m3")),
        }
    )

    def _flags(self, cfg: LaunchConfig, port: int) -> list[str]:
        checked_choice(self, "quantization", cfg.quantization, _SGLANG_QUANTIZATIONS)
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

    def kv_capacity(self, payload: str | bytes) -> int | None:
        return sglang_capacity(payload)


TGI_MIN_IN_FLIGHT = 512
"""The fewest requests a TGI launch accepts at once (``TgiSpec.max_in_flight``)."""


class TgiSpec(EngineSpec):
    kind = "tgi"
    display_name = "TGI"
    dialect = "tgi"
    image = "ghcr.io/huggingface/text-generation-inference:3.3.4"
    image_version = "3.3.4"
    version_path = "/info"  # router/src/server.rs Info: {"version": ..., "model_id": ...}
    container_port = 80
    start_timeout_s = 915.0
    entrypoint = ("text-generation-launcher",)
    exact_length_style = None  # no ignore_eos / min_tokens on the OpenAI route
    length_fields = frozenset()
    # router/src/server.rs tokenize: POST /tokenize {inputs} -> [{id, text, start, stop}]
    tokenize = TokenizeRoute("/tokenize", "inputs", "list")
    kv_log_patterns = (r"[Ss]etting max batch total tokens to (\d+)",)
    kv_capacity_path = "/info"
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
    # The batch token budgets stay tuning flags: the launcher sizes --max-batch-total-tokens
    # from the memory left after the weights, and a fixed one would waste or overrun it.
    extra_flags = (
        integer("--max-input-tokens", low=1, high=1 << 24),
        integer("--max-batch-total-tokens", low=1, high=1 << 30),
        integer("--max-waiting-tokens", low=0, high=1 << 16),
        number("--waiting-served-ratio", low=0, high=100),
        integer("--max-best-of", low=1, high=64),
        integer("--max-stop-sequences", low=0, high=64),
        choice("--dtype", values=("float16", "bfloat16")),
        switch("--disable-custom-kernels"),
    )
    # launcher/src/main.rs: --kv-cache-dtype (KVCacheDtype: fp8, fp8_e5m2) and
    # --max-batch-prefill-tokens (the prefill chunk); prefix caching and chunking are
    # decided from the PREFIX_CACHING variable and the attention backend, no flag.
    switches = MappingProxyType(
        {
            "prefix_caching": toggle(
                None, None, "TGI takes it from its PREFIX_CACHING variable, not a flag"
            ),
            "prefill_chunk_tokens": valued("--max-batch-prefill-tokens"),
            "kv_cache_dtype": valued("--kv-cache-dtype", values=("fp8", "fp8_e5m2")),
        }
    )

    def kv_capacity(self, payload: str | bytes) -> int | None:
        return tgi_capacity(payload)

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
            # The batch cap: requests past it wait in the router's queue (backends/v3
            # backend.rs), as past vLLM's --max-num-seqs.
            *opt("--max-batch-size", cfg.max_num_seqs),
            "--max-concurrent-requests", str(self.max_in_flight(cfg)),
            *opt("--api-key", cfg.api_key),
        ]  # fmt: skip

    def max_in_flight(self, cfg: LaunchConfig) -> int:
        """``--max-concurrent-requests``: past it TGI's router answers 429 (default 128,
        launcher/src/main.rs at v3.3.4), where the other engines queue without limit.  So a
        sweep measures its batching rather than its refusals: 8x the seed's 64
        concurrent, and at least twice the batch cap."""
        return max(TGI_MIN_IN_FLIGHT, 2 * (cfg.max_num_seqs or 0))


TRTLLM_OPTIONS_FILE = "/etc/infer-top/llm-api-options.yml"
"""Where compose/trtllm.yml mounts the options file (its ``configs`` block)."""
TRTLLM_PROMETHEUS_SINCE = (1, 1)
"""The first release with ``return_perf_metrics`` and /prometheus/metrics (PR #5785,
merged to main in August 2025 after release/1.0 was cut).  The LLM API's arguments
forbid unknown keys (llmapi/llm_args.py BaseLlmArgs, ``extra="forbid"``), so an older
release given it would refuse to start: it gets the iteration stats alone."""


def _tag_version(image: str | None) -> str | None:
    """The tag of ``repo:tag`` (an operator's image names its release there, mostly)."""
    if image is None or "@" in image:
        return None
    _, sep, tag = image.rpartition(":")
    return tag if sep and "/" not in tag else None


def _trtllm_both(name: str) -> tuple[str, str]:
    # 1.1-era collector had no prefix; 2026 builds prefix everything "trtllm_".
    return (f"trtllm_{name}", name)


class TrtllmSpec(EngineSpec):
    kind = "trtllm"
    display_name = "TensorRT-LLM"
    dialect = "trtllm"
    image = "nvcr.io/nvidia/tensorrt-llm/release:1.0.0"
    image_version = "1.0.0"
    version_path = "/version"  # serve/openai_server.py: {"version": VERSION}
    container_port = 8000
    start_timeout_s = 1815.0
    entrypoint = ("trtllm-serve",)
    # serve/openai_server.py: /metrics is always routed and answers the iteration stats
    # queue as JSON (empty without enable_iter_perf_stats, and in releases whose own
    # background task drains that queue into Prometheus); /prometheus/metrics is mounted
    # only with return_perf_metrics (404 otherwise).  Both come from the options file
    # (llm_api_options); the Prometheus page's values win, the JSON fills its gaps.
    metrics_path = "/metrics"
    metrics_format = "json"
    second_page_path = "/prometheus/metrics"
    second_page_format = "prometheus"
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
    extra_flags = (integer("--max_beam_width", low=1, high=64),)
    # commands/serve.py (click): --max_num_tokens, --enable_chunked_prefill (off by
    # default); prefix reuse and the KV dtype live in the --extra_llm_api_options file
    # (kv_cache_config), which infer-top does not write.
    switches = MappingProxyType(
        {
            "chunked_prefill": toggle(("--enable_chunked_prefill",), ()),
            "max_batched_tokens": valued("--max_num_tokens"),
        }
    )

    def with_second_page(self, sample: EngineSample, payload: str | bytes) -> EngineSample:
        names = self.metric_names_for(sample.engine_version)
        assert names is not None  # declared above
        prom = names.parse(payload, engine=self.kind, version=sample.engine_version)
        return gaps_filled(prom, sample)

    def llm_api_options(self, image: str | None, platform: str) -> str:
        """The options file (YAML) that turns on the telemetry of the version ``image``
        runs: the iteration stats always, Prometheus where that version has it."""
        options = ["enable_iter_perf_stats: true"]
        version = version_tuple(self.pinned_version(image, platform) or _tag_version(image))
        if version is not None and version >= TRTLLM_PROMETHEUS_SINCE:
            options.append("return_perf_metrics: true")
        # One line (YAML flow style): the Compose env file carries it as one value.
        return "{" + ", ".join(options) + "}"

    def native_command(self, cfg: LaunchConfig) -> tuple[list[str], dict[str, str]]:
        if cfg.metrics:
            raise UnsupportedOption(
                f"{self.display_name} reads its telemetry switches from an options file "
                "that only its Compose file mounts: run it under Compose, or bare with "
                "metrics off"
            )
        return super().native_command(cfg)

    def _compose_extra_env(self, cfg: LaunchConfig, platform: str) -> dict[str, str]:
        return {
            **super()._compose_extra_env(cfg, platform),
            "LLM_API_OPTIONS": self.llm_api_options(cfg.image, platform),
        }

    def _flags(self, cfg: LaunchConfig, port: int) -> list[str]:
        # quantization comes from the checkpoint; trtllm-serve has no key option
        self.unsupported(cfg, "quantization", "api_key")
        options = ["--extra_llm_api_options", TRTLLM_OPTIONS_FILE] if cfg.metrics else []
        return [
            cfg.model,
            *options,
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
        integer("--cache-block-seq-len", low=1, high=1 << 16),
    )
    # cli/utils.py: --enable-prefix-caching (store_true, off by default),
    # --max-prefill-token-num (the tokens of one prefill chunk), --quant-policy 4 / 8
    # (int4 / int8 KV cache).
    switches = MappingProxyType(
        {
            "prefix_caching": toggle(("--enable-prefix-caching",), ()),
            "prefill_chunk_tokens": valued("--max-prefill-token-num"),
            "kv_cache_dtype": valued(
                "--quant-policy", values=(("auto", "0"), ("int4", "4"), ("int8", "8"))
            ),
        }
    )

    def _flags(self, cfg: LaunchConfig, port: int) -> list[str]:
        self.unsupported(cfg, "pipeline_parallel")
        # the quantization is the checkpoint's format (--model-format)
        checked_choice(self, "quantization", cfg.quantization, _LMDEPLOY_MODEL_FORMATS)
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
