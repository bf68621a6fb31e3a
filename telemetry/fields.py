"""How the store keeps a telemetry field, said on the field itself.

A field of a frame class (``telemetry.frames``) whose metadata is ``stored()`` has a
column in the store; the store derives its telemetry columns, its row conversion and
the migration that adds a new column from these declarations (``store.samples``), so
a new field is one line here.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

_COLUMN = "stored_column"


def stored(column: str | None = None) -> Mapping[str, Any]:
    """Field metadata: the store keeps this field, in ``column`` (default: the field's
    name; a different name where a column predates the field's wire name)."""
    return types.MappingProxyType({_COLUMN: column or ""})


@dataclass(frozen=True, slots=True)
class StoredField:
    name: str
    """The attribute on the frame class."""
    column: str
    value_type: Any
    """The annotation without ``None``: ``float | None`` is ``float``."""


def stored_fields(cls: type[Any]) -> tuple[StoredField, ...]:
    """The fields of dataclass ``cls`` the store keeps, in declaration order."""
    hints = typing.get_type_hints(cls)
    kept = []
    for f in dataclasses.fields(cls):
        if _COLUMN not in f.metadata:
            continue
        kept.append(
            StoredField(f.name, f.metadata[_COLUMN] or f.name, _without_none(hints[f.name]))
        )
    return tuple(kept)


def _without_none(hint: Any) -> Any:
    union = typing.get_origin(hint) in (types.UnionType, typing.Union)
    kinds = [a for a in typing.get_args(hint) if a is not type(None)] if union else [hint]
    return kinds[0] if len(kinds) == 1 else hint
