"""The catalog's list of engines: the one place that says which engines exist.

Everything that lists engines (the agent's default allow-list, the TUI's engine
choices, the load generator's ``--engine`` choices, the simulator's profiles)
reads ``kinds()`` or ``all_specs()`` here, so a new engine is one ``EngineSpec``
subclass registered with ``register`` (plus its Compose file and fixtures).
"""

from __future__ import annotations

import re

from engines.catalog.spec import EngineSpec

_KIND = re.compile(r"[a-z][a-z0-9_]{0,31}")
_SPECS: dict[str, EngineSpec] = {}


def register(spec: EngineSpec) -> EngineSpec:
    """Add an engine to the catalog; ValueError for an incomplete spec, a malformed kind
    or one already known."""
    if missing := [name for name in EngineSpec.__annotations__ if not hasattr(spec, name)]:
        raise ValueError(f"{spec.__class__.__name__} does not set {', '.join(missing)}")
    kind = spec.kind
    if not isinstance(kind, str) or not _KIND.fullmatch(kind):
        raise ValueError(f"engine kind {kind!r} must match {_KIND.pattern}")
    if kind in _SPECS:
        raise ValueError(f"engine kind {kind!r} is already in the catalog")
    _SPECS[kind] = spec
    return spec


def unregister(kind: str) -> None:
    """Remove an engine (tests that register one of their own); KeyError if unknown."""
    get_spec(kind)
    del _SPECS[kind]


def all_specs() -> tuple[EngineSpec, ...]:
    """Every engine's spec, in registration order."""
    return tuple(_SPECS.values())


def kinds() -> tuple[str, ...]:
    """Every engine kind, in registration order."""
    return tuple(_SPECS)


def get_spec(kind: str) -> EngineSpec:
    """The spec of an engine kind; KeyError listing the known kinds otherwise."""
    try:
        return _SPECS[kind]
    except (KeyError, TypeError):
        raise KeyError(f"unknown engine kind {kind!r}; known: {', '.join(_SPECS)}") from None
