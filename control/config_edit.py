"""Adding and removing one ``[[nodes]]`` entry in the operator's config file, in place.

The rest of the file (comments, other nodes, ``[alerts]``) stays byte for byte: an entry
is the lines from its ``[[nodes]]`` header to the next table header. The edited text must
parse (``control.config.parse_config``) with every other node as it was, or nothing is
written; the new file replaces the old one atomically, with its permissions.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import tomllib
from collections.abc import Callable
from pathlib import Path

from control.config import ConfigError, NodeConfig, parse_config

HEADER = re.compile(r"^\s*\[")
NODES_HEADER = re.compile(r"^\s*\[\[\s*nodes\s*\]\]\s*(#.*)?$")


def _toml_string(value: str) -> str:
    return json.dumps(value)  # a JSON string is a TOML basic string


def ssh_node_entry(node: NodeConfig) -> str:
    """The ``[[nodes]]`` lines ``infer-top node add`` writes for an ssh node."""
    assert node.ssh is not None and node.token_file is not None
    lines = [
        "[[nodes]]",
        f"name = {_toml_string(node.name)}",
        'transport = "ssh"',
        f"ssh = {_toml_string(node.ssh)}",
        f"url = {_toml_string(node.url)}",
        f"token_file = {_toml_string(str(node.token_file))}",
    ]
    if node.ssh_config is not None:
        lines.append(f"ssh_config = {_toml_string(str(node.ssh_config))}")
    if node.prefix is not None:
        lines.append(f"prefix = {_toml_string(node.prefix)}")
    return "\n".join(lines) + "\n"


def _blocks(text: str) -> list[tuple[str | None, str]]:
    """The file cut at table headers: (node name or None, its text) in order."""
    blocks: list[tuple[str | None, str]] = []
    current: list[str] = []
    for line in text.splitlines(keepends=True):
        if HEADER.match(line) and current:
            blocks.append((_node_name(current), "".join(current)))
            current = []
        current.append(line)
    if current:
        blocks.append((_node_name(current), "".join(current)))
    return blocks


def _node_name(lines: list[str]) -> str | None:
    if not NODES_HEADER.match(lines[0]):
        return None
    try:
        body = tomllib.loads("".join(lines[1:]))
    except tomllib.TOMLDecodeError:
        return None
    name = body.get("name")
    return name.strip() if isinstance(name, str) else None


def read_text(path: Path) -> str:
    try:
        return path.read_text() if path.exists() else ""
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from exc


def _others(text: str, name: str, source: Path) -> tuple[NodeConfig, ...]:
    return tuple(n for n in parse_config(text, source=source).nodes if n.name != name)


def _write(path: Path, old: str, new: str, name: str) -> None:
    if _others(new, name, path) != _others(old, name, path):
        raise ConfigError(
            f"{path}: cannot edit the entry of node {name!r} without touching others "
            f"(an unusual layout?); change it by hand"
        )
    replace_file(path, new, path.stat().st_mode & 0o777 if path.exists() else 0o600)


def replace_file(path: Path, text: str, mode: int) -> None:
    """``path`` holds ``text`` with ``mode``, swapped in atomically: a reader sees the old
    file or the new one, never half of one, and never the text with looser permissions."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as out:
            out.write(text)
        os.chmod(temp, mode)
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


def put_node(path: Path, entry: str, name: str) -> None:
    """Replace node ``name``'s entry by ``entry``, or append it."""
    old = read_text(path)
    blocks = _blocks(old)
    if any(found == name for found, _ in blocks):
        new = "".join(entry + _trailing(text) if found == name else text for found, text in blocks)
    else:
        new = old + ("\n" if old and not old.endswith("\n") else "") + ("\n" if old else "")
        new += entry
    _write(path, old, new, name)


def _trailing(text: str) -> str:
    """The blank lines that ended an entry (kept between it and what follows)."""
    return "\n" * (len(text) - len(text.rstrip("\n")) - 1)


def drop_node(path: Path, name: str) -> bool:
    """Remove node ``name``'s entry; False when there was none."""
    old = read_text(path)
    blocks = _blocks(old)
    if not any(found == name for found, _ in blocks):
        return False
    new = "".join(text for found, text in blocks if found != name)
    if blocks[-1][0] == name and new.strip():  # the blank line put_node set before it
        new = new.rstrip("\n") + "\n"
    _write(path, old, new, name)
    return True


def put_table(path: Path, header: str, entry: str, check: Callable[[str, Path], None]) -> None:
    """Replace the table that starts with the line ``header`` by ``entry``, or append it;
    ``check`` (raising) vets the new text first, and no node may change."""
    old = read_text(path)
    blocks = [text for _, text in _blocks(old)]
    found = [i for i, text in enumerate(blocks) if text.splitlines()[0].strip() == header]
    if found:
        blocks[found[0]] = entry + _trailing(blocks[found[0]])
        new = "".join(blocks)
    else:
        new = old + ("\n" if old and not old.endswith("\n") else "") + ("\n" if old else "")
        new += entry
    check(new, path)
    _write(path, old, new, "")
