"""What infer-top knows about each inference engine (no Docker, no Textual).

``get_spec("vllm").command_args(LaunchConfig(model=...))`` renders real flags;
``compose_env`` renders the env file for ``compose/<compose_name>.yml``;
``parse_metrics`` turns a scrape into one normalised ``EngineSample``.
"""

from __future__ import annotations

from engines.catalog.local import LlamacppSpec, OllamaSpec
from engines.catalog.servers import LmdeploySpec, SglangSpec, TgiSpec, TrtllmSpec, VllmSpec
from engines.catalog.spec import EngineSpec, env_file_text
from engines.catalog.types import (
    PLATFORMS,
    EngineKind,
    Health,
    LaunchConfig,
    MetricsFormat,
    Platform,
    UnsupportedOption,
)
from engines.dialects import MetricsParseError
from engines.llamacpp_slots import SlotsSummary, SlotState, merge_llamacpp, parse_llamacpp_slots

ALL_SPECS: tuple[EngineSpec, ...] = (
    VllmSpec(),
    SglangSpec(),
    TgiSpec(),
    LlamacppSpec(),
    OllamaSpec(),
    TrtllmSpec(),
    LmdeploySpec(),
)
_BY_KIND = {spec.kind: spec for spec in ALL_SPECS}


def get_spec(kind: str | EngineKind) -> EngineSpec:
    """The spec of an engine kind; KeyError listing the known kinds otherwise."""
    try:
        return _BY_KIND[EngineKind(kind)]
    except ValueError:
        known = ", ".join(k.value for k in EngineKind)
        raise KeyError(f"unknown engine kind {kind!r}; known: {known}") from None


__all__ = [
    "ALL_SPECS",
    "PLATFORMS",
    "EngineKind",
    "EngineSpec",
    "Health",
    "LaunchConfig",
    "MetricsFormat",
    "MetricsParseError",
    "Platform",
    "SlotState",
    "SlotsSummary",
    "UnsupportedOption",
    "env_file_text",
    "get_spec",
    "merge_llamacpp",
    "parse_llamacpp_slots",
]
