"""Simulator profiles: an engine on a machine, described as data (TOML).

A profile fixes the scheduler model (slots, KV pool, prefill rate, the decode
step-time law ``step = a + b × batch + c × kv_tokens``) and the engine imitated
(its kind in ``engines.catalog``, whose spec says how that engine behaves).
Profiles ship in ``sim/profiles/*.toml``; a path to any other TOML file works too.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from engines.catalog import EngineSpec, get_spec, kinds

PROFILE_DIR = Path(__file__).parent / "profiles"


class ProfileError(ValueError):
    """A profile that cannot be found or does not describe a valid engine."""


@dataclass(frozen=True, slots=True)
class SimProfile:
    name: str
    kind: str
    """Engine imitated: a kind in ``engines.catalog``."""
    model: str
    """Served model name, as the engine would report it."""
    hardware: str
    description: str = ""
    engine_version: str = "sim"
    # --- scheduler model ---
    max_num_seqs: int = 256
    """Sequences decoded together (vLLM max_num_seqs, llama.cpp -np slots)."""
    kv_block_size_tokens: int = 16
    kv_blocks: int = 4096
    max_model_len: int = 4096
    prefill_tok_s: float = 10_000.0
    step_base_s: float = 0.005
    """a: fixed cost of one engine step."""
    step_per_seq_s: float = 0.0001
    """b: added per sequence in the batch."""
    step_per_kv_token_s: float = 0.0
    """c: added per token held in the KV cache by the batch."""
    prefix_caching: bool = True
    max_waiting: int | None = None
    """Queue capacity; a request beyond it is refused (HTTP 503)."""
    queue_timeout_s: float | None = None
    """A request still queued after this long fails (virtual seconds)."""
    # --- outputs ---
    eos_min_tokens: int = 32
    eos_max_tokens: int = 1024
    """Where the model would stop by itself (EOS), drawn per request under the seed."""
    default_max_tokens: int = 256
    # --- real time ---
    time_scale: float = 1.0
    """Real seconds per simulated second (10 = ten times slower than the modelled engine)."""
    load_time_s: float = 0.0
    """Seconds of "loading model" after start (health answers as the engine does)."""
    close_after_stream: bool = False
    """Close the connection after a streamed response (llama-server does)."""
    simulated: bool = True

    def __post_init__(self) -> None:
        if self.kind not in kinds():
            raise ProfileError(
                f"profile {self.name!r}: unknown engine kind {self.kind!r}; "
                f"known: {', '.join(kinds())}"
            )
        positives = {
            "max_num_seqs": self.max_num_seqs,
            "kv_block_size_tokens": self.kv_block_size_tokens,
            "kv_blocks": self.kv_blocks,
            "max_model_len": self.max_model_len,
            "prefill_tok_s": self.prefill_tok_s,
            "time_scale": self.time_scale,
        }
        for key, value in positives.items():
            if not value > 0:
                raise ProfileError(f"profile {self.name!r}: {key} must be > 0, got {value!r}")
        for key in ("step_base_s", "step_per_seq_s", "step_per_kv_token_s", "load_time_s"):
            if getattr(self, key) < 0:
                raise ProfileError(f"profile {self.name!r}: {key} must be >= 0")
        if not 1 <= self.eos_min_tokens <= self.eos_max_tokens:
            raise ProfileError(f"profile {self.name!r}: need 1 <= eos_min_tokens <= eos_max_tokens")
        if self.step_base_s + self.step_per_seq_s <= 0:
            raise ProfileError(f"profile {self.name!r}: a decode step must take some time")

    @property
    def spec(self) -> EngineSpec:
        """The catalog's spec of the imitated engine."""
        return get_spec(self.kind)

    def step_time_s(self, batch: int, kv_tokens: int, prefill_tokens: int = 0) -> float:
        """Duration of one engine step: decode law plus the prefill work it carries."""
        return (
            self.step_base_s
            + self.step_per_seq_s * batch
            + self.step_per_kv_token_s * kv_tokens
            + prefill_tokens / self.prefill_tok_s
        )

    def with_overrides(self, **changes: Any) -> SimProfile:
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        unknown = set(changes) - set(data)
        if unknown:
            raise ProfileError(f"unknown profile fields: {sorted(unknown)}")
        data.update(changes)
        return SimProfile(**data)


_SECTIONS = ("scheduler", "output", "server")


def profile_from_dict(data: dict[str, Any], *, source: str) -> SimProfile:
    """Flatten the TOML sections into a profile; unknown keys are errors, not ignored."""
    flat: dict[str, Any] = {k: v for k, v in data.items() if k not in _SECTIONS}
    for section in _SECTIONS:
        part = data.get(section, {})
        if not isinstance(part, dict):
            raise ProfileError(f"{source}: [{section}] must be a table")
        clash = set(part) & set(flat)
        if clash:
            raise ProfileError(f"{source}: keys given twice: {sorted(clash)}")
        flat.update(part)
    known = {f.name for f in fields(SimProfile)}
    unknown = set(flat) - known
    if unknown:
        raise ProfileError(f"{source}: unknown keys {sorted(unknown)}")
    for required in ("name", "kind", "model", "hardware"):
        if required not in flat:
            raise ProfileError(f"{source}: missing {required!r}")
    if flat.get("simulated", True) is not True:
        raise ProfileError(f"{source}: a simulator profile cannot claim to be real hardware")
    try:
        return SimProfile(**flat)
    except TypeError as exc:
        raise ProfileError(f"{source}: {exc}") from exc


def list_profiles() -> list[str]:
    """Names of the profiles shipped with infer-top, sorted."""
    return sorted(p.stem for p in PROFILE_DIR.glob("*.toml"))


def load_profile(name_or_path: str | Path) -> SimProfile:
    """A shipped profile by name, or a TOML file by path."""
    path = Path(name_or_path)
    if path.suffix != ".toml":
        path = PROFILE_DIR / f"{name_or_path}.toml"
        if not path.is_file():
            raise ProfileError(
                f"no simulator profile {str(name_or_path)!r}; known: {', '.join(list_profiles())}"
            )
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ProfileError(f"cannot read profile {path}: {exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ProfileError(f"profile {path} is not valid TOML: {exc}") from exc
    return profile_from_dict(data, source=str(path))
