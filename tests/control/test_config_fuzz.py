"""Fuzzing the control plane's config file (issue 22, docs/reliability.md): TOML
documents generated over the config's own keys. Valid nodes parse to exactly what was
written; any other document is a Config or a ConfigError in words, never a TypeError or
AttributeError the CLI would show as a traceback. Each example is bounded in time."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from control.config import Config, ConfigError, parse_config
from tests.waiting import PROPERTY_DEADLINE_MS

SETTINGS = settings(
    max_examples=int(os.environ.get("PROP_EXAMPLES", "60")),
    deadline=PROPERTY_DEADLINE_MS,
    # monkeypatch only removes INFER_TOP_DB, the same for every example
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
BASE = Path("/etc/infer-top/config.toml")

# TOML cannot carry surrogates, and its escapes are JSON's (below the astral planes).
chars = st.characters(max_codepoint=0xFFFF, exclude_categories=("Cs",))
text = st.text(chars, max_size=12)
scalars = (
    st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats()
    | text
    | st.sampled_from(["http://127.0.0.1:7070", "https://gpu-a:7443/", "ssh", "http", "~/tok"])
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3),
    max_leaves=10,
)
NODE_KEYS = ("name", "url", "token_file", "transport", "ssh", "ssh_config", "ca", "fingerprint")


def toml(value: Any) -> str:
    """``value`` as a TOML value (inline tables and arrays)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)  # inf, nan, 1e+16 are TOML too
    if isinstance(value, str):
        return json.dumps(value).replace("\x7f", "\\u007f")
    if isinstance(value, list):
        return "[" + ", ".join(toml(v) for v in value) + "]"
    return "{" + ", ".join(f"{json.dumps(k)} = {toml(v)}" for k, v in value.items()) + "}"


def document(top: dict[str, Any]) -> str:
    return "\n".join(f"{key} = {toml(value)}" for key, value in top.items()) + "\n"


nodes_st = st.lists(
    st.dictionaries(st.sampled_from(NODE_KEYS) | text, values, max_size=6), max_size=3
)
top_st = st.fixed_dictionaries(
    {},
    optional={
        "nodes": nodes_st | values,
        "ui": st.dictionaries(st.just("refresh_s") | text, values, max_size=2) | values,
        "store": st.dictionaries(st.just("path") | text, values, max_size=2) | values,
    },
)


@SETTINGS
@given(top=top_st)
def test_any_config_is_parsed_or_refused_in_words(
    top: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("INFER_TOP_DB", raising=False)
    try:
        config = parse_config(document(top), source=BASE)
    except ConfigError as exc:
        assert str(exc)
    else:
        assert isinstance(config, Config)
        assert all(isinstance(n.url, str) and n.name.strip() for n in config.nodes)
        assert 0.02 <= config.refresh_s <= 5


names = st.from_regex(r"[a-z][a-z0-9-]{0,10}", fullmatch=True)
ports = st.integers(1, 65535)


@SETTINGS
@given(
    nodes=st.lists(
        st.tuples(names, st.sampled_from(["http", "https"]), names, ports, names),
        max_size=3,
        unique_by=lambda n: n[0],
    ),
    refresh_s=st.floats(0.02, 5),
)
def test_valid_nodes_parse_to_exactly_what_was_written(
    nodes: list[tuple[str, str, str, int, str]], refresh_s: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("INFER_TOP_DB", raising=False)
    written = [
        {"name": name, "url": f"{scheme}://{host}:{port}/", "token_file": f"{tok}.token"}
        for name, scheme, host, port, tok in nodes
    ]
    config = parse_config(document({"nodes": written, "ui": {"refresh_s": refresh_s}}), source=BASE)
    assert config.refresh_s == refresh_s
    assert [(n.name, n.url, n.token_file, n.transport) for n in config.nodes] == [
        (w["name"], w["url"].rstrip("/"), BASE.parent / w["token_file"], "http") for w in written
    ]


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ('[ui]\nrefresh_s = "abc"', "ui.refresh_s must be a number of seconds"),
        ("[ui]\nrefresh_s = [1]", "ui.refresh_s must be a number of seconds"),
        ("[ui]\nrefresh_s = true", "ui.refresh_s must be a number of seconds"),
        ("ui = 5", "[ui] must be a table"),
        ("store = 5", "[store] must be a table"),
        ("[store]\npath = 5", "store.path must be a path string"),
        ('[[nodes]]\nname = "a"\nurl = "http://[::1"', "node 'a': 'url' 'http://[::1'"),
        (
            '[[nodes]]\nname = "a"\ntransport = "ssh"\nssh = "h"\nurl = "http://h:99999"',
            "node 'a': 'url' 'http://h:99999'",
        ),
    ],
)
def test_the_shapes_that_once_escaped_as_python_errors_are_refused_in_words(
    text: str, words: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("INFER_TOP_DB", raising=False)
    with pytest.raises(ConfigError) as info:
        parse_config(text)
    assert words in str(info.value)
