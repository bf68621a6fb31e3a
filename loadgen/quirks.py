"""The few engine facts the load generator needs, taken from ``engines.catalog``.

Length forcing, usage-in-stream and connection reuse come from the catalog's
``EngineSpec``; a kind the catalog does not know (``openai``: any other OpenAI-compatible
server) is driven generically and gets the "cannot force length" warning.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from engines.catalog import get_spec, kinds

LengthFields = Callable[[int], dict[str, Any] | None]
GENERIC_KIND = "openai"


def _cannot(n: int) -> None:
    return None


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
    try:
        spec = get_spec(kind)
    except KeyError:
        return LoadQuirks(kind, _cannot, True, True)
    # an engine that closes after every streamed answer (llama-server) would fail a
    # pooled connection on reuse, so it gets fresh ones
    reuse = not spec.closes_after_stream
    return LoadQuirks(kind, spec.exact_length_fields, spec.usage_in_stream, reuse)


def known_kinds() -> tuple[str, ...]:
    return (*kinds(), GENERIC_KIND)
