"""Load profiles: the load tests the Load screen offers, built in or named in the config
file, and saved back to it.

A profile is what ``infer-top bench`` takes as options: a concurrency list or arrival
rates, requests per level, input and output lengths, warm-up, a per-request timeout and
an optional SLO (goodput). In the config file each is a table::

    [load.profiles.long-prompts]
    concurrency = [1, 4, 16]        # or: rate = [0.5, 1, 2]  (requests/s, Poisson arrivals)
    requests = 64
    input_len = 2048
    output_len = 256
    warmup = 4                      # requests per level before measuring
    timeout_s = 300
    slo = "ttft=2s,tpot=100ms"      # goodput counts requests within it
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from loadgen.profiles import LoadSpec
    from loadgen.workload import Workload


class ProfileConfigError(ValueError):
    """A profile that cannot be run (the message names the field and what it takes)."""


NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,39}")
"""A profile's name: a bare TOML key, short enough for the Load screen's list."""


@dataclass(frozen=True, slots=True)
class LoadProfile:
    name: str
    concurrency: tuple[int, ...] = ()
    """Closed-loop levels: this many requests in flight each."""
    requests_per_level: int = 32
    input_len: int = 256
    output_len: int = 128
    rates: tuple[float, ...] = ()
    """Open-loop levels instead (requests/s, Poisson arrivals); one of the two is set."""
    warmup_requests: int = 0
    timeout_s: float = 600.0
    slo: str = ""
    """``ttft=500ms,tpot=50ms``: goodput counts the requests within it ("": none)."""

    def __post_init__(self) -> None:
        if not NAME.fullmatch(self.name):
            raise ProfileConfigError(
                f"profile name {self.name!r}: letters, digits, '-', '_' or '.', at most 40"
            )
        if bool(self.concurrency) == bool(self.rates):
            raise ProfileConfigError(
                f"profile {self.name}: give a concurrency list or arrival rates (one of them)"
            )
        if any(c < 1 for c in self.concurrency) or any(not r > 0 for r in self.rates):
            raise ProfileConfigError(f"profile {self.name}: levels must be positive")
        for what, value in (
            ("requests", self.requests_per_level),
            ("input_len", self.input_len),
            ("output_len", self.output_len),
        ):
            if value < 1:
                raise ProfileConfigError(f"profile {self.name}: {what} must be at least 1")
        if self.warmup_requests < 0 or not self.timeout_s > 0:
            raise ProfileConfigError(f"profile {self.name}: warm-up >= 0 and timeout > 0")
        if self.slo:
            from loadgen.profiles import ProfileError, parse_slo

            try:
                parse_slo(self.slo)
            except ProfileError as exc:
                raise ProfileConfigError(f"profile {self.name}: slo: {exc}") from exc

    @property
    def level_count(self) -> int:
        return len(self.concurrency or self.rates)

    @property
    def levels_text(self) -> str:
        """The levels as the form takes them: "1,2,4" (concurrency) or "0.5,1 req/s"."""
        if self.concurrency:
            return ",".join(str(c) for c in self.concurrency)
        return ",".join(f"{r:g}" for r in self.rates) + " req/s"

    def spec(self) -> LoadSpec:
        """The load spec ``infer-top bench`` builds from the same options."""
        from loadgen.profiles import Level, LoadSpec, OpenLoop, concurrency_sweep, parse_slo

        levels: tuple[Level, ...] = (
            concurrency_sweep(self.concurrency)
            if self.concurrency
            else tuple(OpenLoop(r) for r in self.rates)
        )
        return LoadSpec(
            levels,
            self.requests_per_level,
            warmup_requests=self.warmup_requests,
            request_timeout_s=self.timeout_s,
            slo=parse_slo(self.slo) if self.slo else None,
        )

    def workload(self) -> Workload:
        """The workload ``infer-top bench --input-len ... --output-len ...`` builds."""
        from loadgen.workload import Workload

        return Workload(input_len=self.input_len, output_len=self.output_len)

    def spread(self, nodes: int) -> LoadProfile:
        """The profile as ``nodes`` load nodes run it together (a distributed run): each
        node runs this profile's levels and request counts, so the run's are ``nodes``
        times as many (split back evenly by ``control.distributed.split_spec``)."""
        return replace(
            self,
            concurrency=tuple(c * nodes for c in self.concurrency),
            rates=tuple(r * nodes for r in self.rates),
            requests_per_level=self.requests_per_level * nodes,
            warmup_requests=self.warmup_requests * nodes,
        )

    @property
    def description(self) -> str:
        levels = (
            f"concurrency {self.levels_text}" if self.concurrency else f"rate {self.levels_text}"
        )
        extra = f" · warm-up {self.warmup_requests}" if self.warmup_requests else ""
        extra += f" · SLO {self.slo}" if self.slo else ""
        return (
            f"{self.name}: {levels} · {self.requests_per_level} requests each"
            f" · {self.input_len} in / {self.output_len} out tokens"
            f" · timeout {self.timeout_s:g}s{extra}"
        )

    def toml(self) -> str:
        """Its ``[load.profiles.NAME]`` table, as the config file keeps it."""
        levels = (
            f"concurrency = {json.dumps(list(self.concurrency))}"
            if self.concurrency
            else f"rate = {json.dumps(list(self.rates))}"
        )
        lines = [
            f"[load.profiles.{self.name}]",
            levels,
            f"requests = {self.requests_per_level}",
            f"input_len = {self.input_len}",
            f"output_len = {self.output_len}",
            f"warmup = {self.warmup_requests}",
            f"timeout_s = {self.timeout_s:g}",
        ]
        if self.slo:
            lines.append(f"slo = {json.dumps(self.slo)}")
        return "\n".join(lines) + "\n"


BUILT_IN: tuple[LoadProfile, ...] = (
    LoadProfile("smoke", (1, 2), 4, 32, 16),
    LoadProfile("sweep", (1, 2, 4, 8, 16), 32, 256, 128),
    LoadProfile("seed-h100", (1, 2, 4, 8, 16, 32, 64), 128, 512, 256),
)


def parse_levels(text: str) -> tuple[tuple[int, ...], tuple[float, ...]]:
    """The form's levels: "1,2,4" is concurrency, "0.5,1 req/s" (or "rate 0.5,1") rates."""
    raw = text.strip().lower()
    is_rate = raw.endswith("req/s") or raw.startswith("rate")
    raw = raw.removesuffix("req/s").removeprefix("rate").strip()
    parts = [p.strip() for p in raw.split(",") if p.strip()]
    if not parts:
        raise ProfileConfigError("levels: give concurrency values (1,2,4) or rates (0.5,1 req/s)")
    try:
        if is_rate:
            return (), tuple(float(p) for p in parts)
        return tuple(int(p) for p in parts), ()
    except ValueError:
        raise ProfileConfigError(
            f"levels {text!r}: whole numbers for concurrency (1,2,4), or rates as 0.5,1 req/s"
        ) from None


FIELDS = {
    "concurrency",
    "rate",
    "requests",
    "input_len",
    "output_len",
    "warmup",
    "timeout_s",
    "slo",
}


def _number(table: Mapping[str, object], key: str, default: float, name: str) -> float:
    value = table.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ProfileConfigError(f"load profile {name}: {key} must be a number, not {value!r}")
    return value


def _list(table: Mapping[str, object], key: str, name: str) -> list[float]:
    value = table.get(key, [])
    if not isinstance(value, list) or any(
        isinstance(v, bool) or not isinstance(v, int | float) for v in value
    ):
        raise ProfileConfigError(f"load profile {name}: {key} must be a list of numbers")
    return [float(v) for v in value]


def parse_profiles(raw: object) -> tuple[LoadProfile, ...]:
    """The config file's ``[load.profiles.*]`` tables (unknown keys refused by name)."""
    if raw is None:
        return ()
    if not isinstance(raw, dict):
        raise ProfileConfigError("[load.profiles] must hold one table per profile")
    out = []
    for name, table in raw.items():
        if not isinstance(table, dict):
            raise ProfileConfigError(f"load profile {name}: must be a table")
        unknown = sorted(set(table) - FIELDS)
        if unknown:
            raise ProfileConfigError(
                f"load profile {name}: unknown key(s) {', '.join(unknown)}; "
                f"known: {', '.join(sorted(FIELDS))}"
            )
        concurrency = _list(table, "concurrency", name)
        if any(int(c) != c for c in concurrency):
            raise ProfileConfigError(f"load profile {name}: concurrency takes whole numbers")
        slo = table.get("slo", "")
        if not isinstance(slo, str):
            raise ProfileConfigError(f"load profile {name}: slo must be a string")
        out.append(
            LoadProfile(
                name=str(name),
                concurrency=tuple(int(c) for c in concurrency),
                rates=tuple(float(r) for r in _list(table, "rate", name)),
                requests_per_level=int(_number(table, "requests", 32, name)),
                input_len=int(_number(table, "input_len", 256, name)),
                output_len=int(_number(table, "output_len", 128, name)),
                warmup_requests=int(_number(table, "warmup", 0, name)),
                timeout_s=float(_number(table, "timeout_s", 600.0, name)),
                slo=slo,
            )
        )
    return tuple(out)


def all_profiles(configured: Sequence[LoadProfile]) -> tuple[LoadProfile, ...]:
    """The built-in profiles, each replaced by a configured one of its name, then the rest."""
    named = {p.name: p for p in configured}
    builtin = tuple(named.pop(p.name, p) for p in BUILT_IN)
    return builtin + tuple(named.values())


def save_profile(path: Path, profile: LoadProfile) -> None:
    """Write ``profile`` into the config file at ``path`` (replacing one of its name);
    the rest of the file stays as it was, and nothing is written unless the result
    parses with the profile read back as given."""
    from control.config_edit import put_table  # it reads the config, which reads profiles

    put_table(path, f"[load.profiles.{profile.name}]", profile.toml(), _reads_back(profile))


def _reads_back(profile: LoadProfile) -> Callable[[str, Path], None]:
    def check(text: str, source: Path) -> None:
        from control.config import parse_config

        found = {p.name: p for p in parse_config(text, source=source).load_profiles}
        if found.get(profile.name) != profile:
            raise ProfileConfigError(
                f"{source}: profile {profile.name} would not read back as written; "
                "edit the file by hand"
            )

    return check


def profile_from_form(
    name: str,
    levels: str,
    requests: str,
    input_len: str,
    output_len: str,
    warmup: str,
    timeout_s: str,
    slo: str,
) -> LoadProfile:
    """A profile from the Load screen's form (each field as typed); the error names the
    field that is wrong and what it takes."""

    def number(what: str, text: str, kind: type[int] | type[float]) -> float:
        try:
            return kind(text.strip())
        except ValueError:
            raise ProfileConfigError(f"{what}: {text.strip()!r} is not a number") from None

    concurrency, rates = parse_levels(levels)
    return LoadProfile(
        name=name.strip(),
        concurrency=concurrency,
        rates=rates,
        requests_per_level=int(number("requests", requests, int)),
        input_len=int(number("input tokens", input_len, int)),
        output_len=int(number("output tokens", output_len, int)),
        warmup_requests=int(number("warm-up", warmup or "0", int)),
        timeout_s=number("timeout", timeout_s, float),
        slo=slo.strip(),
    )
