"""Fuzzing the agent's wire messages (issue 22, docs/reliability.md): every message class
``agents.protocol`` decodes, generated from its own declared field types. A message sent by
the encoder decodes back to itself (non-finite floats as null, never NaN); one field given a
value of the wrong JSON type is a ProtocolError that names it, never a message that decodes
with an int where a string was declared (the TUI would fail far from the wire); any other
JSON is a ProtocolError or a message whose fields have their declared types. Each example
is bounded in time (hypothesis deadline)."""

from __future__ import annotations

import json
import math
import os
import types
import typing
from collections.abc import Callable
from dataclasses import fields, is_dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agents import protocol
from agents.protocol import ProtocolError
from telemetry.frames import PROTOCOL_VERSION, TelemetryFrame
from tests.waiting import PROPERTY_DEADLINE_MS

SETTINGS = settings(
    max_examples=int(os.environ.get("PROP_EXAMPLES", "25")),
    deadline=PROPERTY_DEADLINE_MS,  # a decode that hangs fails
    suppress_health_check=[HealthCheck.too_slow],
)

DECODERS: dict[str, tuple[type[Any], Callable[[dict[str, Any]], Any]]] = {
    "frame": (TelemetryFrame, protocol.frame_from_dict),
    "node_info": (protocol.NodeInfo, protocol.node_info_from_dict),
    "engine_info": (protocol.EngineInfo, protocol.engine_info_from_dict),
    "event": (protocol.AgentEvent, protocol.event_from_dict),
    "load_run": (protocol.LoadRunInfo, protocol.load_run_from_dict),
    "models": (protocol.ModelInventory, protocol.model_inventory_from_dict),
}

JSON_SCALARS = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=6)
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner),
    max_leaves=12,
)


def _hints(cls: type[Any]) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def value_st(hint: Any, *, optional: bool = False) -> st.SearchStrategy[Any]:
    """Values of a declared field type; an optional float may be NaN or infinite (not
    measured: sent as null), a float that must be there is finite."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (types.UnionType, typing.Union):
        return st.one_of(*(value_st(a, optional=type(None) in args) for a in args))
    if hint is type(None):
        return st.none()
    if origin is tuple:
        return st.lists(value_st(args[0]), max_size=2).map(tuple)
    if origin is dict:
        return st.dictionaries(st.text(max_size=6), JSON_SCALARS.filter(_finite), max_size=3)
    if is_dataclass(hint):
        return message_st(hint)
    return {
        str: st.text(max_size=8),
        bool: st.booleans(),
        int: st.integers(min_value=-(2**63), max_value=2**63 - 1),
        float: st.floats(allow_nan=optional, allow_infinity=optional),
    }[hint]


def _finite(value: Any) -> bool:
    return not isinstance(value, float) or math.isfinite(value)


def message_st(cls: type[Any]) -> st.SearchStrategy[Any]:
    hints = _hints(cls)
    given_fields = {
        f.name: st.just(PROTOCOL_VERSION) if f.name == "protocol" else value_st(hints[f.name])
        for f in fields(cls)
    }
    return st.builds(cls, **given_fields)


def wire(message: Any) -> dict[str, Any]:
    """What the agent sends for ``message``: encoded, then parsed as the client does."""
    data: dict[str, Any] = json.loads(protocol.dumps(protocol.to_dict(message)))
    return data


def fits(value: Any, hint: Any) -> bool:
    """``value`` is of the declared type ``hint`` (how a decoded field must be)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (types.UnionType, typing.Union):
        return any(fits(value, a) for a in args)
    if hint is type(None):
        return value is None
    if origin is tuple:
        return isinstance(value, tuple) and all(fits(v, args[0]) for v in value)
    if origin is dict:
        return isinstance(value, dict)
    if is_dataclass(hint):
        return isinstance(value, hint) and all(
            fits(getattr(value, f.name), _hints(hint)[f.name]) for f in fields(hint)
        )
    if hint is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, hint)


@pytest.mark.parametrize("name", list(DECODERS))
@SETTINGS
@given(data=st.data())
def test_every_message_decodes_back_to_what_was_sent(name: str, data: st.DataObject) -> None:
    cls, decode = DECODERS[name]
    message = data.draw(message_st(cls))
    sent = wire(message)
    decoded = decode(sent)
    assert type(decoded) is cls
    assert protocol.to_dict(decoded) == protocol.to_dict(message)  # NaN and inf: null
    assert fits(decoded, cls)


def _paths(data: Any, cls: type[Any], prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every (path, declared type) of a field in the wire dict of a ``cls`` message."""
    found = []
    for f in fields(cls):
        hint = _hints(cls)[f.name]
        if f.name == "protocol" or f.name not in data:
            continue
        found.append((*prefix, f.name, hint))
        inner = [a for a in (typing.get_args(hint) or (hint,)) if is_dataclass(a)]  # X | None,
        # tuple[X, ...] or X
        value = data[f.name]
        if inner and isinstance(value, dict):
            found += _paths(value, inner[0], (*prefix, f.name))
        elif inner and isinstance(value, list):
            for i, item in enumerate(value):
                found += _paths(item, inner[0], (*prefix, f.name, i))
    return found


def wrong_for(hint: Any) -> st.SearchStrategy[Any]:
    """JSON values that no field of type ``hint`` may hold."""
    return JSON_VALUES.filter(lambda v: not fits(v, hint) and not _decodes_as(v, hint))


def _decodes_as(value: Any, hint: Any) -> bool:
    """Wire values the decoder rightly turns into ``hint``: a list for a tuple, an object
    for a nested message, null for a non-finite float."""
    union = typing.get_origin(hint) in (types.UnionType, typing.Union)
    args = typing.get_args(hint) if union else (hint,)
    if isinstance(value, list):
        return any(typing.get_origin(a) is tuple for a in args)
    if isinstance(value, dict):
        return any(is_dataclass(a) or typing.get_origin(a) is dict for a in args)
    return False


@pytest.mark.parametrize("name", list(DECODERS))
@SETTINGS
@given(data=st.data())
def test_a_field_of_the_wrong_type_is_a_protocol_error_naming_it(
    name: str, data: st.DataObject
) -> None:
    cls, decode = DECODERS[name]
    sent = wire(data.draw(message_st(cls)))
    *path, hint = data.draw(st.sampled_from(_paths(sent, cls)))
    bad = data.draw(wrong_for(hint))
    target = sent
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = bad
    with pytest.raises(ProtocolError, match=str(path[-1])):
        decode(sent)


@pytest.mark.parametrize("name", list(DECODERS))
@SETTINGS
@given(data=JSON_VALUES)
def test_any_other_json_is_a_protocol_error_or_a_well_typed_message(name: str, data: Any) -> None:
    cls, decode = DECODERS[name]
    if not isinstance(data, dict):
        with pytest.raises(ProtocolError):
            decode(data)  # type: ignore[arg-type]
        return
    try:
        decoded = decode(data)
    except ProtocolError as exc:
        assert str(exc)
    else:
        assert fits(decoded, cls)
