"""Metrics dialects: each engine's telemetry payload → one ``EngineSample``."""

from engines.dialects.jsonish import (
    ollama_response_counts,
    parse_ollama_ps,
    parse_trtllm_iteration_stats,
)
from engines.dialects.prom import MetricsParseError, SeriesTable, parse_prometheus
from engines.dialects.tables import PromDialect, version_tuple

__all__ = [
    "MetricsParseError",
    "PromDialect",
    "SeriesTable",
    "ollama_response_counts",
    "parse_ollama_ps",
    "parse_prometheus",
    "parse_trtllm_iteration_stats",
    "version_tuple",
]
