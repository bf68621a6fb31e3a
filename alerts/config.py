"""Alert thresholds, hold-down times, severities and hooks: the ``[alerts]`` tables of
the operator's config file (``control.config``), each with a documented default::

    [alerts.rules.kv_cache_full]
    threshold = 0.9       # fraction of the KV cache in use
    hold_s = 60           # raise after it held 60 s, clear after it was gone 60 s
    severity = "critical"

    [alerts.hooks.critical]
    command = ["/usr/local/bin/page-oncall"]   # the alert's JSON on stdin
    timeout_s = 10

    [alerts.hooks.warning]
    webhook = "https://chat.example/hooks/infer-top"   # the alert's JSON as the POST body

A rule whose ``enabled = false`` is never evaluated.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import urlparse

from alerts.model import Severity


class AlertConfigError(ValueError):
    """An ``[alerts]`` table infer-top refuses (the message says which key and why)."""


@dataclass(frozen=True, slots=True)
class RuleConfig:
    title: str
    """The alert's name on screen and in hooks."""
    severity: Severity
    hold_s: float
    """Raise once the condition held this long; clear once it was gone this long."""
    threshold: float | None = None
    """The rule's limit, in the unit its doc says (None: the rule has none)."""
    window_s: float | None = None
    """How far back a trend rule (preemptions, waiting queue) compares."""
    enabled: bool = True
    doc: str = ""


DEFAULT_RULES: Mapping[str, RuleConfig] = {
    "engine_exited": RuleConfig(
        "engine exited",
        Severity.CRITICAL,
        hold_s=0.0,
        doc="the engine's process or container died (state crashed): exit code, last log line",
    ),
    "health_lost": RuleConfig(
        "health lost",
        Severity.CRITICAL,
        hold_s=10.0,
        doc="a ready engine stopped answering its health check (unhealthy or dead)",
    ),
    "node_unreachable": RuleConfig(
        "node unreachable",
        Severity.CRITICAL,
        hold_s=0.0,
        threshold=5.0,
        doc="no telemetry frame for threshold seconds (5 intervals of the agent's 1 s)",
    ),
    "power_throttled": RuleConfig(
        "power throttled",
        Severity.WARNING,
        hold_s=5.0,
        doc="clocks held down by the power cap (NVML SwPowerCap, HwPowerBrakeSlowdown)",
    ),
    "thermal_throttled": RuleConfig(
        "thermal throttled",
        Severity.WARNING,
        hold_s=5.0,
        doc="clocks held down by temperature (NVML SwThermalSlowdown, HwThermalSlowdown)",
    ),
    "hw_slowdown": RuleConfig(
        "HW slowdown",
        Severity.CRITICAL,
        hold_s=5.0,
        doc="the hardware slowed the clocks (NVML HwSlowdown: power brake or over-temperature)",
    ),
    "gpu_temperature": RuleConfig(
        "GPU hot",
        Severity.WARNING,
        hold_s=30.0,
        threshold=85.0,
        doc="GPU temperature at or over threshold °C",
    ),
    "kv_cache_full": RuleConfig(
        "KV cache full",
        Severity.WARNING,
        hold_s=30.0,
        threshold=0.95,
        doc="KV cache use at or over threshold (fraction 0-1)",
    ),
    "preemptions_rising": RuleConfig(
        "preemptions rising",
        Severity.WARNING,
        hold_s=10.0,
        window_s=60.0,
        doc="the engine's preemption counter grew within the last window_s seconds",
    ),
    "queue_growing": RuleConfig(
        "waiting queue growing",
        Severity.WARNING,
        hold_s=30.0,
        threshold=1.0,
        window_s=30.0,
        doc="at least threshold requests waiting, and more than window_s seconds before",
    ),
    "run_failures": RuleConfig(
        "load run failing",
        Severity.WARNING,
        hold_s=0.0,
        threshold=0.05,
        doc="a load level's failed requests over threshold (fraction 0-1 of its requests)",
    ),
    "disk_nearly_full": RuleConfig(
        "agent disk nearly full",
        Severity.WARNING,
        hold_s=60.0,
        threshold=0.9,
        doc="the disk of the agent's state (data) dir used at or over threshold (fraction)",
    ),
}
"""Every rule infer-top evaluates, with its defaults (README, "Alerts", lists them)."""

DEFAULT_HOOK_TIMEOUT_S = 10.0


@dataclass(frozen=True, slots=True)
class HookConfig:
    """What runs when an alert of one severity is raised (and cleared)."""

    command: tuple[str, ...] = ()
    """argv, no shell; the alert's JSON on stdin."""
    webhook: str | None = None
    """http(s) URL; the alert's JSON as a POST body."""
    timeout_s: float = DEFAULT_HOOK_TIMEOUT_S


@dataclass(frozen=True, slots=True)
class AlertConfig:
    rules: Mapping[str, RuleConfig] = field(default_factory=lambda: dict(DEFAULT_RULES))
    hooks: Mapping[Severity, HookConfig] = field(default_factory=dict)

    def rule(self, name: str) -> RuleConfig:
        return self.rules[name]

    def enabled(self, name: str) -> bool:
        return self.rules[name].enabled


def _number(where: str, value: object, lo: float, hi: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise AlertConfigError(f"{where} must be a number, got {value!r}")
    if not lo <= float(value) <= hi:
        raise AlertConfigError(f"{where} {value} out of range {lo:g}-{hi:g}")
    return float(value)


def _rule(name: str, base: RuleConfig, raw: object) -> RuleConfig:
    where = f"alerts.rules.{name}"
    if not isinstance(raw, dict):
        raise AlertConfigError(f"[{where}] must be a table")
    known = {"severity", "hold_s", "threshold", "window_s", "enabled"}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise AlertConfigError(f"[{where}]: unknown keys {unknown}; known: {sorted(known)}")
    changes: dict[str, object] = {}
    if "severity" in raw:
        try:
            changes["severity"] = Severity(raw["severity"])
        except ValueError:
            choices = ", ".join(s.value for s in Severity)
            raise AlertConfigError(f"{where}.severity must be one of {choices}") from None
    if "hold_s" in raw:
        changes["hold_s"] = _number(f"{where}.hold_s", raw["hold_s"], 0, 86400)
    if "window_s" in raw:
        if base.window_s is None:
            raise AlertConfigError(f"{where} has no window_s")
        changes["window_s"] = _number(f"{where}.window_s", raw["window_s"], 1, 86400)
    if "threshold" in raw:
        if base.threshold is None:
            raise AlertConfigError(f"{where} has no threshold")
        changes["threshold"] = _number(f"{where}.threshold", raw["threshold"], 0, 1e6)
    if "enabled" in raw:
        if not isinstance(raw["enabled"], bool):
            raise AlertConfigError(f"{where}.enabled must be true or false")
        changes["enabled"] = raw["enabled"]
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


def _hook(severity: str, raw: object) -> HookConfig:
    where = f"alerts.hooks.{severity}"
    if not isinstance(raw, dict):
        raise AlertConfigError(f"[{where}] must be a table")
    unknown = sorted(set(raw) - {"command", "webhook", "timeout_s"})
    if unknown:
        raise AlertConfigError(f"[{where}]: unknown keys {unknown}")
    command = raw.get("command", [])
    if not isinstance(command, list) or not all(isinstance(a, str) and a for a in command):
        raise AlertConfigError(f"{where}.command must be a list of strings (argv, no shell)")
    webhook = raw.get("webhook")
    if webhook is not None and (
        not isinstance(webhook, str) or urlparse(webhook).scheme not in ("http", "https")
    ):
        raise AlertConfigError(f"{where}.webhook must be an http:// or https:// URL")
    if not command and webhook is None:
        raise AlertConfigError(f"[{where}] needs a command or a webhook")
    timeout = raw.get("timeout_s", DEFAULT_HOOK_TIMEOUT_S)
    return HookConfig(tuple(command), webhook, _number(f"{where}.timeout_s", timeout, 0.1, 300))


def parse_alert_config(raw: object) -> AlertConfig:
    """The ``[alerts]`` table (already parsed TOML) over the defaults."""
    if raw is None:
        return AlertConfig()
    if not isinstance(raw, dict):
        raise AlertConfigError("[alerts] must be a table")
    unknown = sorted(set(raw) - {"rules", "hooks"})
    if unknown:
        raise AlertConfigError(f"[alerts]: unknown keys {unknown}; known: hooks, rules")
    rules = dict(DEFAULT_RULES)
    raw_rules = raw.get("rules", {})
    if not isinstance(raw_rules, dict):
        raise AlertConfigError("[alerts.rules] must be a table of rule tables")
    for name, table in raw_rules.items():
        if name not in DEFAULT_RULES:
            raise AlertConfigError(
                f"alerts.rules.{name}: no such rule; rules: {', '.join(DEFAULT_RULES)}"
            )
        rules[name] = _rule(name, DEFAULT_RULES[name], table)
    raw_hooks = raw.get("hooks", {})
    if not isinstance(raw_hooks, dict):
        raise AlertConfigError("[alerts.hooks] must be a table of severity tables")
    hooks: dict[Severity, HookConfig] = {}
    severities = [s.value for s in Severity]
    for severity, table in raw_hooks.items():
        if severity not in severities:
            raise AlertConfigError(
                f"alerts.hooks.{severity}: not a severity; use {', '.join(severities)}"
            )
        hooks[Severity(severity)] = _hook(severity, table)
    return AlertConfig(rules=rules, hooks=hooks)
