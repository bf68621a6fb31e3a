"""EngineSpec: what infer-top knows about one engine.

Each engine is a subclass that sets the class attributes and renders its own
flags in ``_flags``; everything shared (Compose env, health rules, metrics
dispatch, log scraping) lives here once.  Everything that differs between
engines is an attribute or method here, so the rest of infer-top (agents, the
load generator, the simulator, the TUI) reads the catalog instead of keeping
its own per-engine lists.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping
from dataclasses import replace
from types import MappingProxyType

from engines.catalog.flags import Flag, checked_extra_args
from engines.catalog.options import Switch, switch_flags, switched
from engines.catalog.types import (
    PLATFORMS,
    ContextRoute,
    Health,
    LaunchConfig,
    MemoryRule,
    MetricsFormat,
    SecondPageFormat,
    TokenizeRoute,
    UnsupportedOption,
)
from engines.dialects import (
    MetricsParseError,
    PromDialect,
    parse_ollama_ps,
    parse_trtllm_iteration_stats,
)
from engines.sample import EngineSample

ENV_UNSAFE_CHARS = frozenset('"\\$`\n\r\0')
"""What no value Compose reads (its environment, an env file) may hold: quoting and
interpolation characters, line ends, NUL."""
_IDENT = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}")
_VERSION_TEXT = re.compile(r"v?\d[A-Za-z0-9_.+-]{0,63}")
_LOADING_WORDS = {"loading", "starting", "initializing", "warming_up", "warmup"}
_BAD_WORDS = {"error", "unhealthy", "dead", "failed", "fail"}
MAX_COMPOSE_GPUS = 8
"""GPU reservations come from compose/gpus/<count>.yml, one file per count up to this."""


def env_file_text(env: Mapping[str, str]) -> str:
    """An env file Compose reads back verbatim: every value double-quoted.

    Values were checked by ``compose_env``; this refuses anything that Compose
    would interpolate or that could end the quoted value early.
    """
    lines = []
    for key, value in env.items():
        if bad := ENV_UNSAFE_CHARS.intersection(value):
            raise ValueError(f"env value for {key} contains {sorted(bad)!r}")
        lines.append(f'{key}="{value}"')
    return "\n".join(lines) + "\n"


class EngineSpec:
    kind: str
    """The engine's id everywhere: catalog, allow-lists, Compose file names, the wire."""
    display_name: str
    dialect: str
    """The engine family whose HTTP surface and metrics this engine speaks (routes, stream
    shapes, series names and labels): the simulator imitates an engine by this name, so a
    fork that speaks its parent's dialect names the parent."""
    image: str
    """Official x86-64 CUDA image (pinned tag; override with LaunchConfig.image)."""
    jetson_image: str | None = None
    """jetson-containers image (dustynv/...) where one exists."""
    cpu_image: str | None = None
    image_version: str | None = None
    """Engine version in ``image``: picks metric names where the running engine does not
    say its own version (see ``pinned_version``)."""
    jetson_image_version: str | None = None
    """Engine version in ``jetson_image`` (Jetson builds lag: vLLM 0.8 speaks V0-era names)."""
    version_path: str | None = None
    """Where the running engine says its version: a JSON object with a "version" string
    (vLLM and TensorRT-LLM ``/version``, SGLang ``/get_server_info``, TGI ``/info``, Ollama
    ``/api/version``); None where it has no such route."""
    container_port: int
    start_timeout_s: float
    """How long the agent waits for the engine's health after a start before it calls the
    start failed: the longest any of the engine's Compose files lets its healthcheck run
    (``start_period`` + ``retries`` x ``interval``), since a large model's load or an
    engine build takes that long; a start request may set its own (``health_timeout_s``)."""
    entrypoint: tuple[str, ...]
    health_path: str = "/health"
    refuses_while_loading: bool = True
    """True where the HTTP port opens only after the model loaded (vLLM, TGI...)."""
    loading_status: int | None = None
    """What ``health_path`` answers while the model loads: None where connections are
    refused until it has loaded; 503 where the port is open and says "loading" (llama.cpp;
    SGLang through its warm-up); 200 where models load per request (Ollama)."""
    busy_status: int | None = None
    """What ``health_path`` answers, once the engine has been ready, when it is too busy to
    pass its own check in time (SGLang: 503 when its one-token probe got no answer within
    its timeout): "overloaded", not "loading".  None where no answer means that."""
    checks_model_name: bool = False
    """Answers 404 to a request naming a model it does not serve (others ignore the name)."""
    closes_after_stream: bool = False
    """Closes the connection after every streamed answer (llama-server): a client's pooled
    connection would fail on reuse, so it must open fresh ones."""
    metrics_path: str | None = "/metrics"
    metrics_format: MetricsFormat | None = "prometheus"
    metric_names: PromDialect | None = None
    """Which Prometheus series hold each sample field (the first present name wins)."""
    second_page_path: str | None = None
    """A second page that completes the ``metrics_path`` sample (``with_second_page``):
    llama.cpp's per-slot ``/slots``, TensorRT-LLM's Prometheus text.  Fetched on every
    scrape after the metrics page; an HTTP error answer means the engine was started
    without it (llama.cpp without ``--slots``, TensorRT-LLM without perf metrics), which
    is no fault: the metrics page still counts."""
    second_page_format: SecondPageFormat | None = None
    """What ``second_page_path`` serves (the simulator serves the same)."""
    usage_in_stream: bool = True
    """Sends ``usage`` in the last chunk when asked (``stream_options.include_usage``)."""
    models_owned_by: str | None = None
    """``owned_by`` of the models its ``/v1/models`` lists: names the engine's kind."""
    tokenize: TokenizeRoute | None = None
    """How the engine tokenizes text for a client (prompts sized in its tokens); None
    where it cannot (the load generator then sends words and says so)."""
    context_route: ContextRoute | None = None
    """Where the running engine states the most tokens one request may hold (prompt +
    output); None where it does not say (a run that overflows it fails request by
    request, with the engine's own words)."""
    exact_length_style: tuple[str, ...] | None = ("max_tokens", "ignore_eos")
    """Body fields that together force an exact output length; None: impossible."""
    length_fields: frozenset[str] = frozenset({"ignore_eos"})
    """Every request field the engine honours that keeps an answer going past the model's
    own end of sequence (``ignore_eos``, a minimum length): the simulator obeys these."""
    kv_log_patterns: tuple[str, ...] = ()
    """Regexes whose first group is the KV capacity in tokens (last match wins)."""
    kv_capacity_path: str | None = None
    """The route where the running engine states its KV capacity (``kv_capacity`` reads
    it); None where only its start-up log does (``kv_log_patterns``)."""
    memory: MemoryRule
    """How the engine budgets GPU memory (the fit estimator's rule)."""
    tp_engine: bool = True
    """Needs ``ipc: host`` (NCCL shared memory) when sharded."""
    extra_flags: tuple[Flag, ...] = ()
    """The tuning flags ``LaunchConfig.extra_args`` may carry (see engines.catalog.flags);
    never one that binds, names a path, loads a model, that ``_flags`` renders or that a
    typed option spells (``switches``)."""
    switches: Mapping[str, Switch] = MappingProxyType({})
    """How the engine spells each typed start option (``engines.catalog.options``),
    checked against its own CLI source at the pinned version; an option missing here is
    refused by name."""
    model_is_path: bool = True
    """Run bare, the engine opens ``model`` as a file or directory on the host (Ollama
    instead pulls models by name into its own store)."""
    weights_format: str = "safetensors"
    """The weights the engine loads from a Hugging Face repository: ``safetensors``
    (``.bin`` where a repo has none) or ``gguf`` (one quantisation's files);
    ``models pull`` fetches only these (``engines.hub_files``)."""
    model_show_path: str | None = None
    """Where the engine says whether it has a model (POST ``{"model": name}``: 200 yes,
    404 no) when it serves models by name: it is ready only once it has the model."""
    model_pull_path: str | None = None
    """Where it pulls a missing model (POST ``{"model": name}``, progress streamed as
    ``engines.model_pull`` reads it)."""
    api_key_env: str | None = None
    """The variable the engine reads its API key from.  Run bare or under Compose, the
    key goes there rather than onto the command line, which every local user can read
    (``ps``, /proc; a container's processes show in the host's list too).  None where the
    engine takes the key from its flag only: it then stays a flag (see each spec)."""

    # -- launch ------------------------------------------------------------
    def _flags(self, cfg: LaunchConfig, port: int) -> list[str]:
        raise NotImplementedError

    def extra_args(self, cfg: LaunchConfig) -> list[str]:
        """``cfg.extra_args`` as the engine receives them; UnsupportedOption naming
        the first one ``extra_flags`` does not allow."""
        return checked_extra_args(
            self.display_name, self.extra_flags, cfg.extra_args, switch_flags(self.switches)
        )

    def switched(self, cfg: LaunchConfig) -> tuple[list[str], dict[str, str]]:
        """The arguments and environment of ``cfg``'s typed start options; UnsupportedOption
        naming the engine and an option it has no switch for."""
        return switched(self.display_name, self.switches, cfg)

    def command_args(self, cfg: LaunchConfig) -> list[str]:
        """The engine's argv after its entrypoint, listening on ``cfg.port``."""
        return [*self._flags(cfg, cfg.port), *self.switched(cfg)[0], *self.extra_args(cfg)]

    def key_in_env(self, cfg: LaunchConfig) -> tuple[LaunchConfig, dict[str, str]]:
        """``cfg`` without its API key, and the environment that carries the key instead,
        where the engine reads it from a variable (``api_key_env``); else ``cfg`` as is.
        The variable is absent, never empty, without a key: older llama.cpp builds take
        an empty LLAMA_API_KEY as the key "" and then refuse every request without it."""
        if cfg.api_key is None or self.api_key_env is None:
            return cfg, {}
        return replace(cfg, api_key=None), {self.api_key_env: cfg.api_key}

    def native_command(self, cfg: LaunchConfig) -> tuple[list[str], dict[str, str]]:
        """Argv and environment of the engine run bare."""
        keyless, key_env = self.key_in_env(cfg)
        env = {**self.process_env(keyless), **self.switched(keyless)[1], **key_env}
        return self.command_args(keyless), env

    def process_env(self, cfg: LaunchConfig) -> dict[str, str]:
        """Environment the engine reads its settings from (Ollama); most use flags."""
        return {}

    def unsupported(self, cfg: LaunchConfig, *names: str) -> None:
        """Refuse options this engine cannot honour instead of dropping them."""
        defaults = LaunchConfig(model="x")
        set_names = [n for n in names if getattr(cfg, n) != getattr(defaults, n)]
        if set_names:
            raise UnsupportedOption(f"{self.display_name} cannot set {', '.join(set_names)}")

    def compose_name(self, platform: str) -> str:
        if platform not in PLATFORMS:
            raise ValueError(f"platform {platform!r} is not one of {PLATFORMS}")
        if platform == "jetson":
            if self.jetson_image is None:
                raise UnsupportedOption(f"{self.display_name} has no Jetson image")
            return f"{self.kind}-jetson"
        if platform == "cpu":
            if self.cpu_image is None:
                raise UnsupportedOption(f"{self.display_name} has no CPU compose file")
            return f"{self.kind}-cpu"
        return self.kind

    def default_image(self, platform: str) -> str | None:
        """The catalog's image for this platform (None where the engine has none)."""
        chosen = {"nvidia": self.image, "jetson": self.jetson_image, "cpu": self.cpu_image}
        return chosen.get(platform)

    def image_for(self, cfg: LaunchConfig, platform: str) -> str:
        if cfg.image:
            return cfg.image
        image = self.default_image(platform)
        if image is None:
            self.compose_name(platform)  # raises the clear error
            raise ValueError(f"no image for {platform}")  # pragma: no cover
        return image

    def compose_env(
        self, cfg: LaunchConfig, *, deployment_id: str, node: str, platform: str
    ) -> dict[str, str]:
        """Content of the env file for ``compose/<compose_name(platform)>.yml``."""
        self.compose_name(platform)
        for label, value in (("deployment_id", deployment_id), ("node", node)):
            if not _IDENT.fullmatch(value):
                raise ValueError(f"{label} {value!r} must match {_IDENT.pattern}")
        env = {
            "ENGINE_KIND": self.kind,
            "ENGINE_IMAGE": self.image_for(cfg, platform),
            "ENGINE_PORT": str(cfg.port),
            "ENGINE_BIND": "127.0.0.1",
            "MODEL": cfg.model,
            "DEPLOYMENT_ID": deployment_id,
            "NODE_NAME": node,
        }
        if platform != "cpu":
            gpu_ids = cfg.gpu_ids or tuple(range(cfg.gpus_needed))
            if len(gpu_ids) < cfg.gpus_needed:
                raise ValueError(
                    f"tensor x pipeline parallel needs {cfg.gpus_needed} GPUs, "
                    f"gpu_ids lists {len(gpu_ids)}"
                )
            if len(gpu_ids) > MAX_COMPOSE_GPUS:
                raise ValueError(
                    f"the Compose files reserve 1 to {MAX_COMPOSE_GPUS} GPUs per engine "
                    f"(compose/gpus/), gpu_ids lists {len(gpu_ids)}"
                )
            # One variable per id: Compose cannot split a list out of one variable.
            env["GPU_COUNT"] = str(len(gpu_ids))
            env.update({f"GPU_{n}": str(gpu) for n, gpu in enumerate(gpu_ids)})
        # The key reaches the container's environment (the Compose files pass the
        # engine's variable through), never its command line.
        keyless, key_env = self.key_in_env(cfg)
        env.update(self._compose_extra_env(keyless, platform))
        env.update(self.switched(keyless)[1])  # the Compose file passes these through
        env.update(key_env)
        for key, value in env.items():
            if bad := ENV_UNSAFE_CHARS.intersection(value):
                raise ValueError(f"{key} would contain {sorted(bad)!r}, unsafe in an env file")
        return env

    def _compose_extra_env(self, cfg: LaunchConfig, platform: str) -> dict[str, str]:
        args = [*self._flags(cfg, self.container_port), *self.switched(cfg)[0]]
        return {"ENGINE_ARGS": shlex.join([*args, *self.extra_args(cfg)])}

    # -- health ------------------------------------------------------------
    def classify_health(
        self, status: int | None, body: bytes | None, *, was_ready: bool = False
    ) -> Health:
        """Health from one probe of ``health_path``; ``status`` None = refused.

        A refused connection reads as loading for engines that open their port
        only after loading; the caller ends that with the container state or a
        start-up deadline.  ``was_ready``: the engine passed its start-up gate, so
        an answer that meant "loading" before means "overloaded" now (``busy_status``).
        """
        if was_ready and status is not None and status == self.busy_status:
            return Health.OVERLOADED
        if status is None:
            return Health.LOADING if self.refuses_while_loading else Health.DEAD
        if 200 <= status < 300:
            word = _status_word(body)
            if word in _LOADING_WORDS:
                return Health.LOADING
            return Health.UNHEALTHY if word in _BAD_WORDS else Health.READY
        if status == 503 and self._loading_503(body):
            return Health.LOADING
        return Health.UNHEALTHY

    def _loading_503(self, body: bytes | None) -> bool:
        return _status_word(body) in _LOADING_WORDS

    # -- OpenAI API quirks -------------------------------------------------
    def exact_length_fields(self, n: int) -> dict[str, object] | None:
        if n < 1:
            raise ValueError("an exact output length must be at least 1 token")
        if self.exact_length_style is None:
            return None
        values: dict[str, object] = {"max_tokens": n, "min_tokens": n, "ignore_eos": True}
        return {key: values[key] for key in self.exact_length_style}

    # -- telemetry ---------------------------------------------------------
    def metric_names_for(self, version: str | None) -> PromDialect | None:
        """``metric_names`` as this engine version spells them (vLLM renamed series)."""
        return self.metric_names

    def pinned_version(self, image: str | None, platform: str) -> str | None:
        """The catalog's version of the image a start runs (``image`` None: the platform's
        default); None for an operator's own image, whose version only the engine knows."""
        if image not in (None, self.default_image(platform)):
            return None
        pinned = {"nvidia": self.image_version, "jetson": self.jetson_image_version}
        return pinned.get(platform)

    def version_from(self, body: bytes) -> str | None:
        """The version in an answer of ``version_path``; None when it states none."""
        try:
            data = json.loads(body)
        except (ValueError, RecursionError):
            return None
        version = data.get("version") if isinstance(data, dict) else None
        if not isinstance(version, str) or not _VERSION_TEXT.fullmatch(version.strip()):
            return None
        return version.strip()

    def parse_metrics(self, payload: str | bytes, *, version: str | None = None) -> EngineSample:
        """Payload of ``metrics_path`` → EngineSample; MetricsParseError on garbage.
        ``version``: the running engine's (None: unknown, every known name is tried)."""
        fmt = self.metrics_format
        try:
            names = self.metric_names_for(version)
            if fmt == "prometheus" and names is not None:
                return names.parse(payload, engine=self.kind, version=version)
            if fmt == "ollama_ps":
                return parse_ollama_ps(payload, engine=self.kind, version=version)
            if fmt == "json":
                return parse_trtllm_iteration_stats(payload, engine=self.kind, version=version)
        except MetricsParseError:
            raise
        except Exception as exc:  # a dialect bug must still read as a parse failure
            raise MetricsParseError(f"{self.kind} metrics: {exc!r}") from exc
        raise MetricsParseError(f"{self.display_name} exports no metrics endpoint")

    def with_second_page(self, sample: EngineSample, payload: str | bytes) -> EngineSample:
        """``sample`` completed by a page of ``second_page_path``; MetricsParseError on
        garbage.  The page is read as ``sample.engine_version`` spells it."""
        raise MetricsParseError(f"{self.display_name} has no second metrics page")

    def kv_capacity(self, payload: str | bytes) -> int | None:
        """KV capacity in tokens as the page at ``kv_capacity_path`` states it."""
        return None

    def kv_capacity_from_log(self, text: str) -> int | None:
        """KV capacity in tokens as the engine's start-up log states it, if it does."""
        for pattern in self.kv_log_patterns:
            matches = re.findall(pattern, text)
            if matches:
                last = matches[-1]
                groups = last if isinstance(last, tuple) else (last,)
                product = 1
                for group in groups:
                    product *= int(str(group).replace(",", ""))
                return product
        return None

    def __repr__(self) -> str:
        return f"<EngineSpec {self.kind}>"


def _status_word(body: bytes | None) -> str | None:
    """``status`` (or ``error.message``) of a JSON health body, lower-cased."""
    if not body:
        return None
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        return None
    if not isinstance(data, dict):
        return None
    word = data.get("status")
    if word is None and isinstance(data.get("error"), dict):
        word = data["error"].get("message")
    if not isinstance(word, str):
        return None
    word = word.strip().lower()
    return "loading" if word.startswith("loading") else word
