"""The agent's configuration: one frozen value built by the CLI, a test or the TUI."""

from __future__ import annotations

import os
import secrets
import socket
import stat
from dataclasses import dataclass, field
from pathlib import Path

from engines.catalog import kinds


def default_state_dir() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "infer-top" / "agent"


def bundled_trace() -> Path:
    """The H200 NVML recording shipped in the wheel (the replay platform's source)."""
    from importlib.resources import files

    return Path(str(files("agents") / "data" / "h200-trace.json"))


def bundled_processes() -> Path:
    """The replayed GPUs' process lists, built from NVML's documented structure (the
    recording lists no processes)."""
    from importlib.resources import files

    return Path(str(files("agents") / "data" / "h200-processes.json"))


CACHE_VOLUMES = ("infer-top-hf-cache", "infer-top-gguf", "infer-top-ollama", "infer-top-tgi-data")
"""The model-cache volumes of the catalog's Compose files (``MODEL_CACHE_VOLUME``'s
defaults in compose/*.yml)."""


class ConfigError(ValueError):
    """A configuration the agent refuses to start with."""


@dataclass(frozen=True, slots=True)
class AgentConfig:
    token: str
    """The bearer token every route but ``/healthz`` needs."""
    host: str = "127.0.0.1"
    port: int = 7070
    """0 picks a free port (tests, the embedded agent)."""
    tls_cert: Path | None = None
    tls_key: Path | None = None
    allowed_engines: frozenset[str] = field(default_factory=lambda: frozenset({*kinds(), "sim"}))
    """Engine kinds a start request may name: by default every engine in the catalog, and
    simulated ones."""
    allowed_images: frozenset[str] = frozenset()
    """Images a start request may name; an empty set allows only the catalog's defaults."""
    model_dirs: tuple[Path, ...] = ()
    """Host directories engines may mount; any other bind mount is refused."""
    cache_dirs: tuple[Path, ...] = ()
    """Host model caches listed in the inventory (a Hugging Face cache, a native Ollama's
    store) that engines may not mount."""
    cache_volumes: tuple[str, ...] = CACHE_VOLUMES
    """Named Docker volumes whose models the inventory lists."""
    interval_s: float = 1.0
    platform: str | None = None
    """None: detect (nvidia, jetson, linux). "replay": play ``replay_trace`` as GPUs."""
    replay_trace: Path | None = None
    replay_gpus: int = 1
    replay_processes: Path | None = None
    """The replayed GPUs' process lists (``agents.collectors.replay.ReplayProcesses``);
    None: the bundled one."""
    node_name: str = field(default_factory=socket.gethostname)
    state_dir: Path = field(default_factory=default_state_dir)
    health_interval_s: float = 5.0
    """How often a ready engine's health route is asked again (a hung engine turns
    unhealthy within about this plus the 2 s probe timeout)."""
    stop_timeout_s: float = 10.0
    frame_buffer: int = 600
    """Frames kept for resuming streams (10 min at 1 Hz)."""
    native_binaries: dict[str, Path] = field(default_factory=dict)
    """Engine kind -> executable for the process runtime (llamacpp, ollama); only these run."""
    adopt_on_start: bool = True
    load_log_max_bytes: int = 256 * 1024 * 1024
    """Most bytes one node-side load run's event file may hold (about a million requests'
    records); a run that outgrows it fails in words."""
    docker_events: bool = True

    def __post_init__(self) -> None:
        if len(self.token) < 16:
            raise ConfigError("the token must be at least 16 characters (use --token-file)")
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ConfigError("TLS needs both --tls-cert and --tls-key")
        if not 0.05 <= self.interval_s <= 60:
            raise ConfigError(f"interval {self.interval_s}s out of range 0.05-60 s")
        if not 0.1 <= self.health_interval_s <= 300:
            raise ConfigError(f"health interval {self.health_interval_s}s out of range 0.1-300 s")
        if self.replay_gpus < 1:
            raise ConfigError("replay_gpus must be at least 1")

    @property
    def audit_log(self) -> Path:
        return self.state_dir / "audit.log"

    @property
    def scheme(self) -> str:
        return "https" if self.tls_cert else "http"


def new_token() -> str:
    return secrets.token_urlsafe(32)


def read_token(path: Path | None = None, env: str = "INFER_AGENT_TOKEN") -> str:
    """The token from a file (first line) or the environment; a clear error when neither.
    A token file others may read is refused (like ssh's keys): the token is root on the node."""
    if path is not None:
        try:
            mode = path.stat().st_mode
            text = path.read_text().strip()
        except OSError as exc:
            raise ConfigError(f"cannot read token file {path}: {exc.strerror}") from exc
        if mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise ConfigError(
                f"token file {path} is readable by others ({stat.filemode(mode)}); "
                f"run: chmod 600 {path}"
            )
        if not text:
            raise ConfigError(f"token file {path} is empty")
        return text.splitlines()[0].strip()
    value = os.environ.get(env, "").strip()
    if not value:
        raise ConfigError(f"no token: pass --token-file FILE or set {env}")
    return value
