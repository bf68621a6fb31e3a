"""What infer-top knows about each inference engine (no Docker, no Textual).

``get_spec("vllm").command_args(LaunchConfig(model=...))`` renders real flags;
``compose_env`` renders the env file for ``compose/<compose_name>.yml``;
``parse_metrics`` turns a scrape into one normalised ``EngineSample``;
``kinds()`` / ``all_specs()`` list the engines (see ``engines.catalog.registry``).
"""

from __future__ import annotations

from engines.catalog.local import LlamacppSpec, OllamaSpec
from engines.catalog.registry import all_specs, get_spec, kinds, register, unregister
from engines.catalog.servers import LmdeploySpec, SglangSpec, TgiSpec, TrtllmSpec, VllmSpec
from engines.catalog.spec import ENV_UNSAFE_CHARS, EngineSpec, env_file_text
from engines.catalog.types import (
    PLATFORMS,
    Health,
    LaunchConfig,
    MemoryRule,
    MetricsFormat,
    Platform,
    UnsupportedOption,
)
from engines.dialects import MetricsParseError
from engines.llamacpp_slots import SlotsSummary, SlotState, merge_llamacpp, parse_llamacpp_slots

for _spec in (
    VllmSpec(),
    SglangSpec(),
    TgiSpec(),
    LlamacppSpec(),
    OllamaSpec(),
    TrtllmSpec(),
    LmdeploySpec(),
):
    register(_spec)

__all__ = [
    "ENV_UNSAFE_CHARS",
    "PLATFORMS",
    "EngineSpec",
    "Health",
    "LaunchConfig",
    "MemoryRule",
    "MetricsFormat",
    "MetricsParseError",
    "Platform",
    "SlotState",
    "SlotsSummary",
    "UnsupportedOption",
    "all_specs",
    "env_file_text",
    "get_spec",
    "kinds",
    "merge_llamacpp",
    "parse_llamacpp_slots",
    "register",
    "unregister",
]
