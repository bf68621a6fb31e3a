"""The telemetry tables, derived from the frame declarations (``telemetry.frames``).

Each table keeps one row per GPU or engine of a frame: the frame's stored fields
(node, ts), then the sample's.  Columns, the insert and the row values all follow from
the fields marked ``stored()``, and ``add_declared_columns`` (run after the numbered
migrations) gives an older file the column of a newly declared field, so adding a
field is one edit in ``telemetry.frames``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlite_utils import Database

from telemetry import EngineTelemetry, GpuSample, StoredField, TelemetryFrame, stored_fields

_SCALARS = (bool, int, float, str, bytes)
"""What sqlite3 binds as it is (and sqlite-utils maps to a column type)."""


@dataclass(frozen=True, slots=True)
class SampleTable:
    name: str
    items: str
    """The frame field whose items become this table's rows ("gpus", "engines")."""
    key: tuple[StoredField, ...]
    """The frame's stored fields, heading every row."""
    values: tuple[StoredField, ...]
    """The item's stored fields."""
    insert_sql: str

    @property
    def fields(self) -> tuple[StoredField, ...]:
        return self.key + self.values

    def rows(self, frame: TelemetryFrame) -> list[tuple[Any, ...]]:
        key = tuple(getattr(frame, f.name) for f in self.key)
        return [
            key + tuple(getattr(item, f.name) for f in self.values)
            for item in getattr(frame, self.items)
        ]


def _checked(cls: type[Any]) -> tuple[StoredField, ...]:
    found = stored_fields(cls)
    for f in found:
        if f.value_type not in _SCALARS or not f.column.isidentifier():
            kind = getattr(f.value_type, "__name__", f.value_type)
            raise TypeError(
                f"{cls.__name__}.{f.name}: the store keeps bool, int, float, str or bytes "
                f"values (optionally | None) in a column named like an identifier, not {kind} "
                f"in {f.column!r}; change the field or drop stored() from it"
            )
    return found


def _table(name: str, items: str, item_cls: type[Any]) -> SampleTable:
    key, values = _checked(TelemetryFrame), _checked(item_cls)
    columns = [f.column for f in key + values]
    sql = f"INSERT INTO {name} ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})"
    return SampleTable(name, items, key, values, sql)


GPU_SAMPLES = _table("gpu_samples", "gpus", GpuSample)
ENGINE_SAMPLES = _table("engine_samples", "engines", EngineTelemetry)
SAMPLE_TABLES = (GPU_SAMPLES, ENGINE_SAMPLES)


def add_declared_columns(db: Database) -> None:
    """Add the column of every stored field a telemetry table lacks (a field declared
    after the file was made); rows already there get NULL in it: nothing is lost."""
    for table in SAMPLE_TABLES:
        have = set(db.table(table.name).columns_dict)
        for f in table.fields:
            if f.column not in have:
                db.table(table.name).add_column(f.column, f.value_type)
