"""Extra launch arguments: the tuning flags a launch may append to an engine's command
line (``LaunchConfig.extra_args``).

Engines run as root beside the Docker socket, so extra arguments pass an allow-list each
engine declares (``EngineSpec.extra_flags``): only flags that tune the engine, with typed
values.  A flag that binds an address, names a file, loads a model or code, or repeats
one the launch config already renders is refused by name.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from engines.catalog.types import UnsupportedOption

_INT = re.compile(r"-?\d{1,10}")
_FLOAT = re.compile(r"-?\d{1,10}(\.\d{1,9})?")


@dataclass(frozen=True, slots=True)
class Flag:
    """One allowed flag: its spellings and what its value may be."""

    names: tuple[str, ...]
    takes: Literal["switch", "int", "float", "choice"] = "switch"
    low: float = 0
    high: float = 0
    choices: tuple[str, ...] = ()

    def problem(self, value: str) -> str | None:
        """Why ``value`` is refused for this flag, or None when it is fine."""
        if self.takes == "choice":
            return None if value in self.choices else f"one of {', '.join(self.choices)}"
        pattern = _INT if self.takes == "int" else _FLOAT
        if pattern.fullmatch(value) and self.low <= float(value) <= self.high:
            return None
        if self.takes == "int":
            return f"an integer in {int(self.low)}..{int(self.high)}"
        return f"a number in {self.low:g}..{self.high:g}"


def switch(*names: str) -> Flag:
    return Flag(names)


def integer(*names: str, low: int, high: int) -> Flag:
    return Flag(names, "int", low, high)


def number(*names: str, low: float, high: float) -> Flag:
    return Flag(names, "float", low, high)


def choice(*names: str, values: tuple[str, ...]) -> Flag:
    return Flag(names, "choice", choices=values)


def checked_extra_args(
    engine: str,
    allowed: Sequence[Flag],
    args: Sequence[str],
    typed: Mapping[str, str] | None = None,
) -> list[str]:
    """``args`` as the engine receives them (``--flag=value`` split in two), or
    UnsupportedOption naming the first argument the allow-list does not permit;
    ``typed`` maps the flags a typed start option spells to that option's name."""
    typed = typed or {}
    by_name = {name: flag for flag in allowed for name in flag.names}
    listing = ", ".join(flag.names[-1] for flag in allowed) or "none"
    out: list[str] = []
    seen: set[Flag] = set()
    rest = list(args)
    while rest:
        arg = rest.pop(0)
        name, eq, inline = arg.partition("=") if arg.startswith("--") else (arg, "", "")
        flag = by_name.get(name)
        if name in typed:
            raise UnsupportedOption(
                f"extra argument {name} is a typed start option: set {typed[name]} instead"
            )
        if flag is None:
            raise UnsupportedOption(
                f"extra argument {arg!r} is refused: {engine} allows only these tuning "
                f"flags here: {listing}"
            )
        if flag in seen:  # the engine would take the last one: one value per flag
            raise UnsupportedOption(f"extra argument {name} is given twice")
        seen.add(flag)
        if flag.takes == "switch":
            if eq:
                raise UnsupportedOption(f"extra argument {name} takes no value")
            out.append(name)
            continue
        if not eq and not rest:
            raise UnsupportedOption(f"extra argument {name} needs a value")
        value = inline if eq else rest.pop(0)
        if problem := flag.problem(value):
            raise UnsupportedOption(f"extra argument {name} {value!r}: the value must be {problem}")
        out += [name, value]
    return out
