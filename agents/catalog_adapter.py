"""What the agent adds to the engine catalog's ``EngineSpec``: its errors in the
agent's terms, launch settings from wire data, and the Compose file on disk.

Everything else the manager, runtimes and scraper need they read from the spec
itself (``get_spec(kind).health_path``, ``.classify_health``, ``.parse_metrics``...).
"""

from __future__ import annotations

import re
from dataclasses import fields
from pathlib import Path
from typing import Any

from compose import compose_file
from engines import catalog
from engines.catalog import EngineSpec, LaunchConfig, UnsupportedOption
from engines.catalog.options import SWITCHED_OPTIONS


class UnknownEngine(LookupError):
    pass


def get_spec(kind: str) -> EngineSpec:
    """The catalog's spec of ``kind``; UnknownEngine naming the known kinds otherwise."""
    try:
        return catalog.get_spec(kind)
    except KeyError as exc:
        raise UnknownEngine(str(exc).strip("\"'")) from exc


def launch_config(data: dict[str, Any]) -> LaunchConfig:
    """The catalog's LaunchConfig from wire data; unknown keys are refused by name."""
    known = {f.name for f in fields(LaunchConfig)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ValueError(
            f"unknown launch settings: {', '.join(unknown)} (known: {', '.join(sorted(known))})"
        )
    values = dict(data)
    for name in ("gpu_ids", "extra_args"):  # JSON lists; anything else LaunchConfig refuses
        if values.get(name) is None:
            values.pop(name, None)
        elif isinstance(values[name], list):
            values[name] = tuple(values[name])
    return LaunchConfig(**values)


def extra_args_problem(spec: EngineSpec, extra_args: Any) -> str | None:
    """Why the engine's allow-list refuses ``extra_args`` (naming the argument), or
    None; a value that is no list of strings is a ValueError."""
    cfg = launch_config({"model": "x", "extra_args": extra_args})
    try:
        spec.extra_args(cfg)
    except UnsupportedOption as exc:
        return str(exc)
    return None


def start_options_problem(kind: str, launch: dict[str, Any]) -> str | None:
    """Why the engine refuses a typed start option ``launch`` sets (naming the engine and
    the option), or None; an ill-typed value is a ValueError."""
    typed = {name: launch[name] for name in SWITCHED_OPTIONS if launch.get(name) is not None}
    if not typed:
        return None
    try:
        get_spec(kind).switched(launch_config({"model": "x", **typed}))
    except UnsupportedOption as exc:
        return str(exc)
    return None


def compose_path(spec: EngineSpec, platform: str) -> Path:
    """The engine's Compose file for this platform (UnsupportedOption where none)."""
    return compose_file(spec.compose_name(platform))


def declared_namespaces(spec: EngineSpec, platform: str) -> dict[str, str]:
    """``pid`` / ``ipc`` / ``network_mode`` the engine's own Compose file sets."""
    try:
        text = compose_path(spec, platform).read_text()
    except (OSError, ValueError):  # no file for this platform: the start fails later, clearly
        return {}
    return {
        m.group(1): m.group(2).strip("\"'")
        for m in re.finditer(r"^\s+(pid|ipc|network_mode):\s*(\S+)", text, re.M)
    }


def api_key_variables() -> frozenset[str]:
    """Every variable an engine reads its API key from (the specs' ``api_key_env``): the
    agent keeps its own copies of these out of the engines it starts."""
    return frozenset(spec.api_key_env for spec in catalog.all_specs() if spec.api_key_env)
