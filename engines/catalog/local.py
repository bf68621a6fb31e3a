"""The single-box engines: llama.cpp's llama-server and Ollama."""

from __future__ import annotations

from types import MappingProxyType

from engines.catalog.flags import choice, integer, switch
from engines.catalog.options import by_env, toggle, valued
from engines.catalog.servers import opt
from engines.catalog.spec import EngineSpec
from engines.catalog.types import (
    ContextRoute,
    LaunchConfig,
    MemoryRule,
    TokenizeRoute,
    UnsupportedOption,
)
from engines.dialects import PromDialect
from engines.kv_capacity import llamacpp_capacity
from engines.llamacpp_slots import merge_llamacpp, parse_llamacpp_slots
from engines.sample import EngineSample

RIG_IMAGE = "infer-top/llama-server:0.3.36-r1"
_KV_TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1")


class LlamacppSpec(EngineSpec):
    kind = "llamacpp"
    weights_format = "gguf"
    display_name = "llama.cpp"
    dialect = "llamacpp"
    image = "ghcr.io/ggml-org/llama.cpp:server-cuda"
    jetson_image = "dustynv/llama_cpp:r36.4.0"
    cpu_image = RIG_IMAGE
    container_port = 8080
    start_timeout_s = 906.0
    entrypoint = ("llama-server",)
    # binds its port first and answers 503 "Loading model" while loading
    refuses_while_loading = False
    loading_status = 503
    closes_after_stream = True
    models_owned_by = "llamacpp"  # tools/server/server.cpp /v1/models
    # tools/server/server.cpp: POST /tokenize {content, add_special} -> {tokens}
    tokenize = TokenizeRoute("/tokenize", "content", "tokens", fields=(("add_special", False),))
    # tools/server/server.cpp: a slot's cells; a longer prompt is refused
    # (exceed_context_size_error), a longer answer cut where the cells run out
    context_route = ContextRoute("/props", ("default_generation_settings", "n_ctx"))
    second_page_path = "/slots"
    second_page_format = "llamacpp_slots"
    kv_capacity_path = "/props"
    tp_engine = False
    # -c KV cells for all -np slots together (each slot gets c/np), allocated up front
    memory = MemoryRule(None, overhead_mib=256, concurrency="slots (-np)")
    # The KV gauges exist only in builds before May 2025 (PR #13660); newer builds
    # need the /slots estimate (with_second_page).
    metric_names = PromDialect(
        kv_usage=("llamacpp:kv_cache_usage_ratio",),
        running=("llamacpp:requests_processing",),
        waiting=("llamacpp:requests_deferred",),
        prompt_tokens=("llamacpp:prompt_tokens_total",),
        generation_tokens=("llamacpp:tokens_predicted_total",),
        prefix_hits=("llamacpp:prompt_tokens_cached_total",),
        prefix_misses=("llamacpp:prompt_tokens_total",),
    )
    api_key_env = "LLAMA_API_KEY"  # common/arg.cpp: --api-key ... set_env("LLAMA_API_KEY")
    # common/arg.cpp spellings (llama.cpp takes "--flag value" only, never "--flag=value")
    extra_flags = (
        integer("-t", "--threads", low=1, high=1024),
        integer("-tb", "--threads-batch", low=1, high=1024),
        integer("--threads-http", low=1, high=1024),
        integer("-ub", "--ubatch-size", low=1, high=1 << 20),
        choice("-fa", "--flash-attn", values=("on", "off", "auto")),
        switch("-cb", "--cont-batching"),
        switch("-nocb", "--no-cont-batching"),
        switch("-nkvo", "--no-kv-offload"),
        integer("--cache-reuse", low=0, high=1 << 20),
        integer("-s", "--seed", low=0, high=(1 << 32) - 1),
        integer("-to", "--timeout", low=1, high=86400),
        switch("--no-warmup"),
    )
    # common/arg.cpp: --cache-prompt / --no-cache-prompt (on by default); prompts are
    # always processed in chunks of -b (the logical batch: the tokens of one step).
    # The long spellings, so that the short ones stay refused as extra arguments too.
    switches = MappingProxyType(
        {
            "prefix_caching": toggle(("--cache-prompt",), ("--no-cache-prompt",)),
            "chunked_prefill": toggle((), None, "it always splits prompts by its batch size"),
            "max_batched_tokens": valued("--batch-size"),
            "kv_cache_dtype": valued("--cache-type-k", "--cache-type-v", values=_KV_TYPES),
        }
    )
    kv_log_patterns = (
        r"n_slots = (\d+), n_ctx_slot = (\d+), kv_unified = 'false'",
        r"n_ctx_slot = (\d+), kv_unified = 'true'",
        r"llama_kv_cache\w*: size = [^(\n]*\(\s*(\d+) cells",
        r"llama_context: n_ctx\s*=\s*(\d+)",
    )

    def kv_capacity(self, payload: str | bytes) -> int | None:
        return llamacpp_capacity(payload)

    def with_second_page(self, sample: EngineSample, payload: str | bytes) -> EngineSample:
        return merge_llamacpp(sample, parse_llamacpp_slots(payload))

    def slots(self, cfg: LaunchConfig) -> int:
        return cfg.max_num_seqs or 1

    def ctx_cells(self, cfg: LaunchConfig) -> int | None:
        """``-c``: the KV cells of all slots together (context_len is per sequence)."""
        return None if cfg.context_len is None else cfg.context_len * self.slots(cfg)

    def _flags(self, cfg: LaunchConfig, port: int) -> list[str]:
        # GGUF files carry their quantization; llama.cpp has no memory fraction
        self.unsupported(cfg, "quantization", "gpu_mem_fraction")
        if cfg.tensor_parallel > 1 and cfg.pipeline_parallel > 1:
            raise UnsupportedOption("llama.cpp splits either by rows or by layers, not both")
        split = (
            ["--split-mode", "row"]
            if cfg.tensor_parallel > 1
            else ["--split-mode", "layer"]
            if cfg.pipeline_parallel > 1
            else []
        )
        return [
            "-m", cfg.model,
            "--host", "0.0.0.0",
            "--port", str(port),
            "-ngl", "999",  # all layers on the GPU; CPU builds ignore it
            *split,
            *opt("-c", self.ctx_cells(cfg)),
            "-np", str(self.slots(cfg)),
            *(["--metrics", "--slots"] if cfg.metrics else []),
            *opt("--api-key", cfg.api_key),
        ]  # fmt: skip

    def _compose_extra_env(self, cfg: LaunchConfig, platform: str) -> dict[str, str]:
        if platform != "cpu":
            return super()._compose_extra_env(cfg, platform)
        self._flags(cfg, self.container_port)  # same refusals as the GPU files
        if cfg.extra_args or self.switched(cfg)[0]:
            raise UnsupportedOption(
                f"{self.display_name}'s CPU Compose file spells its flags out and takes no "
                "extra_args or start options such as prefix_caching or kv_cache_dtype: run "
                "it natively (runtime process) to tune it"
            )
        # compose/llama-server-cpu.yml spells its flags out; fill its variables
        cells = self.ctx_cells(cfg)
        env = {"MODEL_PATH": cfg.model, "PARALLEL": str(self.slots(cfg))}
        if cells is not None:
            env["CONTEXT_LEN"] = str(cells)
        return env

    def compose_name(self, platform: str) -> str:
        # the rig's file predates the catalog and keeps its name
        return "llama-server-cpu" if platform == "cpu" else super().compose_name(platform)


class OllamaSpec(EngineSpec):
    kind = "ollama"
    display_name = "Ollama"
    dialect = "ollama"
    image = "ollama/ollama:0.12.6"
    image_version = "0.12.6"
    version_path = "/api/version"  # server/routes.go: {"version": version.Version}
    jetson_image = "dustynv/ollama:r36.4.0"
    container_port = 11434
    start_timeout_s = 66.0
    entrypoint = ("ollama",)
    health_path = "/"  # answers "Ollama is running"; models load per request
    refuses_while_loading = False
    loading_status = 200  # a request waits while its model loads
    checks_model_name = True
    tp_engine = False
    metrics_path = "/api/ps"
    metrics_format = "ollama_ps"
    model_is_path = False  # `ollama serve` loads nothing; models are pulled by name
    # "/" answers before any model is there: ready means the model is (docs/api.md)
    model_show_path = "/api/show"
    model_pull_path = "/api/pull"
    exact_length_style = None  # num_predict caps, nothing forces past EOS
    length_fields = frozenset()
    # No tokenize route, but docs/api.md's /api/generate counts: `raw` sends the prompt
    # with no template and `prompt_eval_count` is the "number of tokens in the prompt" (the
    # whole prompt, cached or not, since ollama#5371); one token is generated per count.
    tokenize = TokenizeRoute(
        "/api/generate",
        "prompt",
        "prompt_eval_count",
        sends_model=True,
        fields=(("raw", True), ("stream", False), ("options", {"num_predict": 1})),
    )
    kv_log_patterns = (r"\bn_ctx\s*=\s*(\d+)",)
    # context x OLLAMA_NUM_PARALLEL cells, allocated up front
    memory = MemoryRule(None, overhead_mib=256, concurrency="OLLAMA_NUM_PARALLEL")
    # envconfig/config.go: OLLAMA_KV_CACHE_TYPE (f16, q8_0, q4_0) applies only with
    # OLLAMA_FLASH_ATTENTION on; a runner reuses a slot's cached prompt prefix always.
    switches = MappingProxyType(
        {
            "prefix_caching": toggle((), None, "its runners always reuse cached prefixes"),
            "kv_cache_dtype": by_env(
                ("OLLAMA_KV_CACHE_TYPE", "{}"),
                ("OLLAMA_FLASH_ATTENTION", "1"),
                values=("f16", "q8_0", "q4_0"),
            ),
        }
    )

    def process_env(self, cfg: LaunchConfig) -> dict[str, str]:
        self.unsupported(
            cfg, "tensor_parallel", "pipeline_parallel", "gpu_mem_fraction", "quantization",
            "api_key",
        )  # fmt: skip
        env = {"OLLAMA_HOST": f"0.0.0.0:{cfg.port}", "OLLAMA_KEEP_ALIVE": "-1"}
        if cfg.context_len is not None:
            env["OLLAMA_CONTEXT_LENGTH"] = str(cfg.context_len)
        if cfg.max_num_seqs is not None:
            env["OLLAMA_NUM_PARALLEL"] = str(cfg.max_num_seqs)
        return env

    def _flags(self, cfg: LaunchConfig, port: int) -> list[str]:
        self.process_env(cfg)
        return ["serve"]

    def _compose_extra_env(self, cfg: LaunchConfig, platform: str) -> dict[str, str]:
        env = super()._compose_extra_env(cfg, platform)
        inner = self.process_env(cfg)
        inner["OLLAMA_HOST"] = f"0.0.0.0:{self.container_port}"
        return env | inner
