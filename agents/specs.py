"""The agent's view of the engine catalog (``engines.catalog``): one adapter so
the manager, runtimes and scraper share how a spec is read."""

from __future__ import annotations

import re
from dataclasses import fields, is_dataclass
from functools import cache
from pathlib import Path
from typing import Any

from engines.sample import EngineSample


class UnknownEngine(LookupError):
    pass


def _value(health: Any) -> str:
    return str(getattr(health, "value", health))


class EngineSpec:
    """Wraps the catalog's spec for ``kind``."""

    def __init__(self, kind: str, spec: Any) -> None:
        self.kind = kind
        self.spec = spec

    @property
    def health_path(self) -> str:
        return str(self.spec.health_path)

    @property
    def metrics_path(self) -> str | None:
        path = self.spec.metrics_path
        return None if path is None else str(path)

    def default_image(self, platform: str) -> str | None:
        """The catalog's image for this platform (None where the engine has none)."""
        image = {
            "nvidia": self.spec.image,
            "jetson": self.spec.jetson_image,
            "cpu": self.spec.cpu_image,
        }.get(platform)
        return None if image is None else str(image)

    def classify_health(self, status: int | None, body: bytes | None) -> str:
        return _value(self.spec.classify_health(status, body))

    @property
    def model_is_path(self) -> bool:
        """Run bare, the engine opens its model from the host's disk."""
        return bool(self.spec.model_is_path)

    def extra_args_problem(self, extra_args: Any) -> str | None:
        """Why this engine's allow-list refuses ``extra_args`` (naming the argument), or
        None; a value that is no list of strings is a ValueError."""
        from engines.catalog import UnsupportedOption

        cfg = launch_config({"model": "x", "extra_args": extra_args})
        try:
            self.spec.extra_args(cfg)
        except UnsupportedOption as exc:
            return str(exc)
        return None

    def native_command(self, launch: dict[str, Any]) -> tuple[list[str], dict[str, str]]:
        """Flags and environment of the engine run bare (the process runtime)."""
        args, env = self.spec.native_command(launch_config(launch))
        return [str(a) for a in args], {str(k): str(v) for k, v in env.items()}

    def parse_metrics(self, payload: str | bytes) -> EngineSample:
        sample: EngineSample = self.spec.parse_metrics(payload)
        return sample

    def compose_file(self, platform: str) -> Path:
        from compose import compose_file

        return compose_file(str(self.spec.compose_name(platform)))

    def compose_env(
        self, launch: dict[str, Any], *, deployment_id: str, node: str, platform: str
    ) -> dict[str, str]:
        env = self.spec.compose_env(
            launch_config(launch), deployment_id=deployment_id, node=node, platform=platform
        )
        return {str(k): str(v) for k, v in env.items()}

    def declared_namespaces(self, platform: str) -> dict[str, str]:
        """``pid`` / ``ipc`` / ``network_mode`` the engine's own Compose file sets."""
        try:
            text = self.compose_file(platform).read_text()
        except (OSError, ValueError):  # no file for this platform: the start fails later, clearly
            return {}
        return {
            m.group(1): m.group(2).strip("\"'")
            for m in re.finditer(r"^\s+(pid|ipc|network_mode):\s*(\S+)", text, re.M)
        }


@cache
def api_key_variables() -> frozenset[str]:
    """Every variable an engine reads its API key from (the catalog's ``api_key_env``)."""
    from engines.catalog import ALL_SPECS

    return frozenset(spec.api_key_env for spec in ALL_SPECS if spec.api_key_env)


@cache
def get_spec(kind: str) -> EngineSpec:
    try:
        from engines import catalog
    except ImportError as exc:
        raise UnknownEngine(f"the engine catalog is not installed ({exc})") from exc
    try:
        spec = catalog.get_spec(kind)
    except (KeyError, ValueError) as exc:
        raise UnknownEngine(str(exc).strip("\"'")) from exc
    return EngineSpec(kind, spec)


def launch_config(data: dict[str, Any]) -> Any:
    """The catalog's LaunchConfig from wire data; unknown keys are refused by name."""
    from engines.catalog import LaunchConfig

    known = {f.name for f in fields(LaunchConfig)} if is_dataclass(LaunchConfig) else set(data)
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
