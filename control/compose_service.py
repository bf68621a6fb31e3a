"""An engine's Compose service as Compose itself resolves it for an env file.

``infer-top k8s render`` builds its Deployment from what this reads out of the engine's
own Compose file (entrypoint, command, environment, the model cache's mount point, the
shared-memory need, the mounted config files), interpolated with the environment the
catalog renders for Compose (``EngineSpec.compose_env``): one source for both renders.
No Compose binary is needed; tests check the result against ``docker compose config``.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import yaml

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_OPERATORS = (":-", ":?", ":+", "-", "?", "+")


class ComposeFileError(ValueError):
    """The Compose file holds something this reader cannot resolve as Compose would."""


@dataclass(frozen=True, slots=True)
class ConfigFile:
    """A file Compose mounts from its ``configs`` block (``content``)."""

    target: str
    content: str


@dataclass(frozen=True, slots=True)
class ComposeService:
    """The one service of an engine's Compose file, interpolated."""

    image: str
    entrypoint: tuple[str, ...]
    command: tuple[str, ...]
    environment: dict[str, str]
    """Only the variables that end up set in the container: a pass-through entry
    (``VAR:`` with no value) appears when ``env`` sets it, as Compose does."""
    cache_target: str
    """Where the model cache volume (a named volume of the file) is mounted."""
    ipc: str | None
    configs: tuple[ConfigFile, ...]


def interpolate(text: str, env: Mapping[str, str]) -> str:
    """``text`` with Compose's ``$VAR``, ``${VAR}``, ``${VAR:-default}``, ``${VAR-default}``,
    ``${VAR:?error}``, ``${VAR?error}``, ``${VAR:+alt}``, ``${VAR+alt}`` and ``$$``
    expanded from ``env`` alone (never this process's environment); a default is expanded
    only where it is used, as Compose does."""
    out: list[str] = []
    i = 0
    while i < len(text):
        if text[i] != "$":
            out.append(text[i])
            i += 1
            continue
        following = text[i + 1 : i + 2]
        if following == "$":
            out.append("$")
            i += 2
        elif following == "{":
            end = _closing_brace(text, i + 2)
            out.append(_expand(text[i + 2 : end], env))
            i = end + 1
        elif found := _NAME.match(text, i + 1):
            out.append(env.get(found.group(), ""))
            i = found.end()
        else:
            out.append("$")
            i += 1
    return "".join(out)


def _closing_brace(text: str, start: int) -> int:
    depth = 0
    for j in range(start, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            if depth == 0:
                return j
            depth -= 1
    raise ComposeFileError(f"unclosed ${{ in {text!r}")


def _expand(body: str, env: Mapping[str, str]) -> str:
    found = _NAME.match(body)
    if found is None:
        raise ComposeFileError(f"${{{body}}} names no variable")
    name, rest = found.group(), body[found.end() :]
    if not rest:
        return env.get(name, "")
    operator = next((op for op in _OPERATORS if rest.startswith(op)), None)
    if operator is None:
        raise ComposeFileError(f"${{{body}}}: unknown operator")
    word = rest[len(operator) :]
    value = env.get(name)
    # ":" makes an empty value count as unset
    is_set = value is not None and (value != "" or not operator.startswith(":"))
    if operator.endswith("-"):
        return value if is_set and value is not None else interpolate(word, env)
    if operator.endswith("?"):
        if not is_set or value is None:
            raise ComposeFileError(f"{name}: {interpolate(word, env)}")
        return value
    return interpolate(word, env) if is_set else ""


def _resolved(value: object, env: Mapping[str, str]) -> object:
    if isinstance(value, str):
        return interpolate(value, env)
    if isinstance(value, list):
        return [_resolved(v, env) for v in value]
    if isinstance(value, dict):
        return {k: _resolved(v, env) for k, v in value.items()}
    return value


def _mapping(value: object, where: str) -> dict[str, object]:
    if not isinstance(value, dict):
        raise ComposeFileError(f"{where} is not a mapping")
    return {str(k): v for k, v in value.items()}


def read_service(path: Path, env: Mapping[str, str]) -> ComposeService:
    """The single service of the engine's Compose file at ``path``, resolved with ``env``."""
    document = _mapping(yaml.safe_load(path.read_text()), path.name)
    services = _mapping(document.get("services"), f"{path.name}: services")
    if len(services) != 1:
        raise ComposeFileError(f"{path.name} has {len(services)} services, an engine file one")
    ((_, raw),) = services.items()
    service = _mapping(_resolved(raw, env), f"{path.name}: the service")
    return ComposeService(
        image=str(service["image"]),
        entrypoint=tuple(_words(service.get("entrypoint"))),
        command=tuple(_words(service.get("command"))),
        environment=_environment(service.get("environment"), env),
        cache_target=_cache_target(service.get("volumes"), document, path.name),
        ipc=None if service.get("ipc") is None else str(service["ipc"]),
        configs=_configs(service.get("configs"), _resolved(document.get("configs"), env)),
    )


def _words(value: object) -> list[str]:
    """A command as Compose takes it: a list as is, a string split shell-style."""
    if value is None:
        return []
    if isinstance(value, list):
        return [str(v) for v in value]
    return shlex.split(str(value))


def _environment(value: object, env: Mapping[str, str]) -> dict[str, str]:
    if value is None:
        return {}
    if isinstance(value, list):  # ["KEY=value", "PASSED_THROUGH"]
        pairs = [str(item).partition("=") for item in value]
        value = {key: (text if sep else None) for key, sep, text in pairs}
    resolved: dict[str, str] = {}
    for key, text in _mapping(value, "environment").items():
        if text is None:  # passed through: set only where the env sets it
            if key in env:
                resolved[key] = env[key]
        else:
            resolved[key] = str(text)
    return resolved


def _cache_target(volumes: object, document: dict[str, object], name: str) -> str:
    named = set(_mapping(document.get("volumes") or {}, f"{name}: volumes"))
    for volume in volumes if isinstance(volumes, list) else ():
        if isinstance(volume, dict):  # the long syntax
            source, target = str(volume.get("source")), str(volume.get("target"))
        else:  # SOURCE:TARGET[:MODE]
            source, _, target = str(volume).partition(":")
        if source in named:
            return target.split(":", 1)[0]
    raise ComposeFileError(f"{name} mounts no named volume for the model cache")


def _configs(uses: object, declared: object) -> tuple[ConfigFile, ...]:
    files = []
    for use in uses if isinstance(uses, list) else ():
        entry = _mapping(use, "configs entry")
        source = _mapping(declared or {}, "configs").get(str(entry["source"]))
        content = _mapping(source, f"config {entry['source']}").get("content")
        if content is None:
            raise ComposeFileError(f"config {entry['source']} has no inline content")
        files.append(ConfigFile(target=str(entry["target"]), content=str(content)))
    return tuple(files)
