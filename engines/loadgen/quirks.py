"""The few engine facts the load generator needs, in ONE place.

``engines.catalog`` is the source of truth when present (``get_spec(kind)``
with ``exact_length_fields(n)`` and ``usage_in_stream``); the table below is
the fallback so the load generator works without it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

LengthFields = Callable[[int], dict[str, Any] | None]


def _ignore_eos(n: int) -> dict[str, Any]:
    return {"ignore_eos": True}


def _ignore_eos_min_tokens(n: int) -> dict[str, Any]:
    return {"ignore_eos": True, "min_tokens": n}


def _cannot(n: int) -> None:
    return None


# kind -> (how to force exactly n output tokens, sends usage in streams)
_FALLBACK: dict[str, tuple[LengthFields, bool]] = {
    "vllm": (_ignore_eos_min_tokens, True),
    "sglang": (_ignore_eos_min_tokens, True),
    "trtllm": (_ignore_eos, True),
    "lmdeploy": (_ignore_eos_min_tokens, True),
    "llamacpp": (_ignore_eos, True),
    "tgi": (_cannot, True),
    "ollama": (_cannot, True),
    "openai": (_cannot, True),
}
# llama-server closes the socket after every streamed answer (DESIGN.md, client pitfalls).
_CLOSES_AFTER_STREAM = frozenset({"llamacpp"})


@dataclass(frozen=True, slots=True)
class LoadQuirks:
    kind: str
    exact_length_fields: LengthFields
    usage_in_stream: bool
    reuse_connections: bool

    @property
    def forces_length(self) -> bool:
        return self.exact_length_fields(1) is not None

    def length_warning(self) -> str | None:
        if self.forces_length:
            return None
        return (
            f"engine {self.kind!r} cannot force the output length: answers may stop "
            "early at end-of-sequence, so output tokens per request will vary"
        )


def quirks_for(kind: str) -> LoadQuirks:
    kind = kind.lower()
    reuse = kind not in _CLOSES_AFTER_STREAM
    spec = _catalog_spec(kind)
    if spec is not None:
        return LoadQuirks(
            kind, spec.exact_length_fields, bool(getattr(spec, "usage_in_stream", True)), reuse
        )
    fields, usage = _FALLBACK.get(kind, (_cannot, True))
    return LoadQuirks(kind, fields, usage, reuse)


def known_kinds() -> tuple[str, ...]:
    return tuple(_FALLBACK)


def _catalog_spec(kind: str) -> Any | None:
    try:
        from engines import catalog  # type: ignore[attr-defined,unused-ignore]
    except ImportError:
        return None
    get_spec = getattr(catalog, "get_spec", None)
    if get_spec is None:
        return None
    try:
        return get_spec(kind)
    except (KeyError, ValueError, LookupError):
        return None
