"""Typed start options: the optimisation switches an operator sets on a start
(``LaunchConfig``'s prefix caching, chunked prefill, token budgets, KV-cache dtype),
each spelled per engine by its spec's ``switches`` table.

An engine without a switch for an option refuses it by name (``UnsupportedOption``)
instead of starting without it; a switch a typed option spells is no extra argument
(``extra_args`` refuses it and names the option to set instead).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from engines.catalog.types import LaunchConfig, UnsupportedOption

SWITCHED_OPTIONS = (
    "prefix_caching",
    "chunked_prefill",
    "prefill_chunk_tokens",
    "max_batched_tokens",
    "kv_cache_dtype",
)
"""The options each engine spells through its ``switches`` table."""

RUN_OPTIONS = (
    *SWITCHED_OPTIONS,
    "max_num_seqs",
    "tensor_parallel",
    "pipeline_parallel",
    "quantization",
    "context_len",
    "gpu_mem_fraction",
)
"""The launch settings a run is stored with and compared by (``run_options``)."""

_LABELS = {
    "prefix_caching": "prefix caching",
    "chunked_prefill": "chunked prefill",
    "prefill_chunk_tokens": "prefill chunk",
    "max_batched_tokens": "max batched tokens",
    "kv_cache_dtype": "KV",
    "max_num_seqs": "max seqs",
    "tensor_parallel": "TP",
    "pipeline_parallel": "PP",
    "quantization": "quant",
    "context_len": "ctx",
    "gpu_mem_fraction": "mem",
}


@dataclass(frozen=True, slots=True)
class Switch:
    """How one engine spells one typed option.

    A yes/no option uses ``on`` / ``off``: the arguments that ask for it, ``()`` where
    the engine does so by default and has no flag for it, None where it cannot.  A
    valued option uses ``flags`` (each followed by the value) or ``env`` (the variable
    that carries it), with ``values`` the values allowed, as (given, engine's spelling)
    pairs; no ``values``: any positive integer.
    """

    on: tuple[str, ...] | None = None
    off: tuple[str, ...] | None = None
    flags: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    """(variable, value) pairs; the value "{}" is replaced by the option's value."""
    values: tuple[tuple[str, str], ...] = ()
    why_not: str = ""
    """Said when the engine refuses a value (where to look instead)."""


def toggle(on: tuple[str, ...] | None, off: tuple[str, ...] | None, why_not: str = "") -> Switch:
    return Switch(on=on, off=off, why_not=why_not)


def valued(*flags: str, values: Iterable[str | tuple[str, str]] = ()) -> Switch:
    pairs = tuple((v, v) if isinstance(v, str) else v for v in values)
    return Switch(flags=flags, values=pairs)


def by_env(*env: tuple[str, str], values: Iterable[str] = ()) -> Switch:
    return Switch(env=env, values=tuple((v, v) for v in values))


def switch_flags(switches: Mapping[str, Switch]) -> dict[str, str]:
    """Every flag the typed options spell, naming the option that owns it."""
    owned: dict[str, str] = {}
    for option, switch in switches.items():
        for flag in (*(switch.on or ()), *(switch.off or ()), *switch.flags):
            if flag.startswith("-"):
                owned[flag] = option
    return owned


def _spelled(
    engine: str, option: str, switch: Switch | None, value: Any
) -> tuple[list[str], dict[str, str]]:
    """The arguments and environment that ask ``engine`` for ``option`` = ``value``."""
    if switch is None:
        raise UnsupportedOption(f"{engine} has no switch for {option}: leave it unset")
    if isinstance(value, bool):
        chosen = switch.on if value else switch.off
        if chosen is None:
            state = "on" if value else "off"
            why = f" ({switch.why_not})" if switch.why_not else ""
            raise UnsupportedOption(f"{engine} cannot turn {option} {state}{why}")
        return list(chosen), {}
    text = str(value)
    if switch.values:
        allowed = dict(switch.values)
        if text not in allowed:
            raise UnsupportedOption(
                f"{engine} takes {option} as one of {', '.join(allowed)}, not {text!r}"
            )
        text = allowed[text]
    args = [part for flag in switch.flags for part in (flag, text)]
    return args, {name: spec.replace("{}", text) for name, spec in switch.env}


def switched(
    engine: str, switches: Mapping[str, Switch], cfg: LaunchConfig
) -> tuple[list[str], dict[str, str]]:
    """The arguments and environment for every typed option ``cfg`` sets;
    UnsupportedOption naming the engine and the first option it cannot honour, or two
    options that would set one flag (contradicting each other)."""
    args: list[str] = []
    env: dict[str, str] = {}
    owner: dict[str, str] = {}
    for option in SWITCHED_OPTIONS:
        value = getattr(cfg, option)
        if value is None:
            continue
        more_args, more_env = _spelled(engine, option, switches.get(option), value)
        for name in [a for a in more_args if a.startswith("-")] + list(more_env):
            if name in owner:
                raise UnsupportedOption(
                    f"{engine} spells {owner[name]} and {option} with one setting ({name}): "
                    "set one of them"
                )
            owner[name] = option
        args += more_args
        env |= more_env
    return args, env


def run_options(config: Mapping[str, Any]) -> dict[str, Any]:
    """The start options a run's engine was launched with (set ones only), from its
    launch config as the agent reports it: what a comparison tells runs apart by."""
    defaults = {"tensor_parallel": 1, "pipeline_parallel": 1}
    return {
        name: config[name]
        for name in RUN_OPTIONS
        if config.get(name) is not None and config.get(name) != defaults.get(name)
    }


def options_text(options: Mapping[str, Any]) -> str:
    """``run_options`` in words, e.g. "prefix caching off, KV fp8" ("" for none)."""
    parts = []
    for name in RUN_OPTIONS:
        if name not in options:
            continue
        value = options[name]
        shown = ("on" if value else "off") if isinstance(value, bool) else str(value)
        parts.append(f"{_LABELS[name]} {shown}")
    return ", ".join(parts)
