"""Alerts: rules over the telemetry the control plane already receives, each with a
severity and a hold-down time (docs/design.md, "Alerts").  Domain code: it imports
only the shared vocabulary (``telemetry``, ``runs``), never a screen or the store,
so the TUI, the store and the headless commands share one definition of an alert."""

from alerts.config import (
    DEFAULT_RULES,
    AlertConfig,
    AlertConfigError,
    HookConfig,
    RuleConfig,
    parse_alert_config,
)
from alerts.engine import AlertEngine, Change
from alerts.model import Alert, Observation, Severity
from alerts.rules import (
    FrameRules,
    run_observation,
    stale_observation,
    throttle_reason_names,
    value_text,
)

__all__ = [
    "DEFAULT_RULES",
    "Alert",
    "AlertConfig",
    "AlertConfigError",
    "AlertEngine",
    "Change",
    "FrameRules",
    "HookConfig",
    "Observation",
    "RuleConfig",
    "Severity",
    "parse_alert_config",
    "run_observation",
    "stale_observation",
    "throttle_reason_names",
    "value_text",
]
