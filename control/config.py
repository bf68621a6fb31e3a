"""The operator's configuration: which nodes to watch and where runs are kept.

TOML at ``$XDG_CONFIG_HOME/infer-top/config.toml`` (``INFER_TOP_CONFIG`` names
another file; ``INFER_TOP_DB`` another database)::

    [[nodes]]
    name = "h100-a"
    url = "https://10.0.0.5:7070"
    token_file = "~/.config/infer-top/h100-a.token"
    fingerprint = "sha256:..."      # or ca = "lab-ca.pem": the agent's TLS certificate

    [[nodes]]
    name = "jetson"
    transport = "ssh"              # through the system ssh client (control.ssh_tunnel)
    ssh = "jetson"                 # a destination: user@host or a ~/.ssh/config alias
    url = "http://127.0.0.1:7070"  # the agent as the node sees it (this is the default)
    token_file = "jetson.token"

    [alerts.rules.kv_cache_full]   # thresholds, hold-down, severity per rule
    threshold = 0.9
    [alerts.hooks.critical]        # a command or webhook per severity
    webhook = "https://chat.example/hooks/infer-top"

    [cost]                         # hourly prices per node or GPU model, per kWh
    kwh = 0.30
    [cost.nodes]
    h100-a = 19.90
    [load.profiles.long-prompts]   # a Load screen profile (control.load_profiles)
    concurrency = [1, 4, 16]
    input_len = 2048

(every rule, its default and the hooks: ``alerts.config``, README "Alerts"; prices:
``control.cost``).
With no file (or no ``[[nodes]]``) the TUI starts an embedded agent on this
machine, so the first run shows something real.
"""

from __future__ import annotations

import os
import re
import stat
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal
from urllib.parse import urlparse

from alerts import AlertConfig, AlertConfigError, parse_alert_config
from control.cost import CostConfigError, Prices, parse_prices
from control.load_profiles import LoadProfile, ProfileConfigError, parse_profiles
from store import default_db_path


class ConfigError(ValueError):
    """A configuration infer-top refuses to start with (the message says why)."""


def config_path() -> Path:
    explicit = os.environ.get("INFER_TOP_CONFIG")
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "infer-top" / "config.toml"


Transport = Literal["http", "ssh"]
SSH_DEFAULT_URL = "http://127.0.0.1:7070"
DEFAULT_REFRESH_S = 0.125
FINGERPRINT = re.compile(r"sha256:((?:[0-9a-f]{2}:?){31}[0-9a-f]{2})", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class NodeConfig:
    name: str
    url: str
    """The agent's URL; with the ssh transport, as the node itself sees it (its loopback)."""
    token_file: Path | None = None
    transport: Transport = "http"
    ssh: str | None = None
    """The ssh destination (``user@host`` or a ``~/.ssh/config`` alias)."""
    ssh_config: Path | None = None
    """An ssh_config file for this node (``ssh -F``); else ssh reads the user's own."""
    ca: Path | None = None
    """The CA file that signed the agent's TLS certificate (instead of the system's)."""
    fingerprint: str | None = None
    """The agent's TLS certificate pinned: ``sha256:`` and 64 lower-case hex digits."""
    prefix: str | None = None
    """Where ``node add`` installed the agent on the node (a path there, not here):
    ``node remove`` and the next ``node add`` use it."""

    def read_token(self) -> str:
        """The node's bearer token; refuses a token file others can read (like ssh)."""
        if self.token_file is None:
            raise ConfigError(f"node {self.name!r}: no token_file")
        try:
            mode = self.token_file.stat().st_mode
            text = self.token_file.read_text().strip()
        except OSError as exc:
            raise ConfigError(
                f"node {self.name!r}: cannot read token file {self.token_file}: {exc.strerror}"
            ) from exc
        if mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise ConfigError(
                f"node {self.name!r}: token file {self.token_file} is readable by others; "
                f"run: chmod 600 {self.token_file}"
            )
        if not text:
            raise ConfigError(f"node {self.name!r}: token file {self.token_file} is empty")
        return text.splitlines()[0].strip()


@dataclass(frozen=True, slots=True)
class Config:
    nodes: tuple[NodeConfig, ...] = ()
    db_path: Path = field(default_factory=default_db_path)
    refresh_s: float = DEFAULT_REFRESH_S
    """Slowest the screen lags the newest frame (frames are coalesced in between)."""
    source: Path | None = None
    alerts: AlertConfig = field(default_factory=AlertConfig)
    prices: Prices = field(default_factory=Prices)
    """``[cost]``: hourly prices per node or GPU model, and per kWh (``control.cost``)."""
    load_profiles: tuple[LoadProfile, ...] = ()
    """The ``[load.profiles.*]`` tables (``control.load_profiles``)."""

    @property
    def embedded(self) -> bool:
        """No node configured: serve this machine with an embedded agent."""
        return not self.nodes


def _path(raw: dict[str, object], key: str, name: str, base: Path) -> Path | None:
    value = raw.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise ConfigError(f"node {name!r}: {key!r} must be a path string")
    path = Path(value).expanduser()
    return path if path.is_absolute() else base / path


def _fingerprint(raw: object, name: str) -> str | None:
    if raw is None:
        return None
    match = FINGERPRINT.fullmatch(raw.strip()) if isinstance(raw, str) else None
    if match is None:
        raise ConfigError(
            f"node {name!r}: 'fingerprint' must be sha256: and 64 hex digits (colons allowed), "
            f"as infer-agent prints it at start-up; got {raw!r}"
        )
    return "sha256:" + match.group(1).replace(":", "").lower()


def _ssh(raw: dict[str, object], name: str) -> tuple[Transport, str | None]:
    transport, destination = raw.get("transport", "http"), raw.get("ssh")
    if transport not in ("http", "ssh"):
        raise ConfigError(
            f'node {name!r}: \'transport\' must be "http" or "ssh", not {transport!r}'
        )
    if transport == "http":
        if destination is not None:
            raise ConfigError(f"node {name!r}: 'ssh' is set but 'transport' is not \"ssh\"")
        return "http", None
    if not isinstance(destination, str) or not destination.strip():
        raise ConfigError(f"node {name!r}: transport \"ssh\" needs 'ssh' = a destination or alias")
    if destination.startswith("-") or any(c.isspace() for c in destination.strip()):
        raise ConfigError(f"node {name!r}: 'ssh' {destination!r} is not an ssh destination")
    return "ssh", destination.strip()


def _node(raw: object, index: int, base: Path) -> NodeConfig:
    if not isinstance(raw, dict):
        raise ConfigError(f"[[nodes]] entry {index + 1} is not a table")
    name = raw.get("name")
    if not isinstance(name, str) or not name.strip():
        raise ConfigError(f"[[nodes]] entry {index + 1}: 'name' must be a non-empty string")
    transport, destination = _ssh(raw, name)
    url = raw.get("url", SSH_DEFAULT_URL if transport == "ssh" else None)
    try:
        parsed = urlparse(url) if isinstance(url, str) else None
        port = parsed.port if parsed else None
    except ValueError as exc:  # "Invalid IPv6 URL", "Port out of range"
        raise ConfigError(f"node {name!r}: 'url' {url!r}: {exc}") from None
    if not isinstance(url, str) or parsed is None or parsed.scheme not in ("http", "https"):
        raise ConfigError(f"node {name!r}: 'url' must be an http:// or https:// URL, got {url!r}")
    if not parsed.hostname:
        raise ConfigError(f"node {name!r}: 'url' {url!r} has no host")
    if transport == "ssh" and port is None:
        raise ConfigError(f"node {name!r}: 'url' {url!r} needs the agent's port (ssh forwards it)")
    prefix = raw.get("prefix")
    if prefix is not None and (transport != "ssh" or not isinstance(prefix, str) or not prefix):
        raise ConfigError(
            f"node {name!r}: 'prefix' (where node add installed the agent) must be a path "
            f"on the node, and only an ssh node has one"
        )
    fingerprint, ca = _fingerprint(raw.get("fingerprint"), name), _path(raw, "ca", name, base)
    if fingerprint and ca:
        raise ConfigError(f"node {name!r}: set 'ca' or 'fingerprint', not both")
    return NodeConfig(
        name=name.strip(),
        url=url.rstrip("/"),
        token_file=_path(raw, "token_file", name, base),
        transport=transport,
        ssh=destination,
        ssh_config=_path(raw, "ssh_config", name, base),
        ca=ca,
        fingerprint=fingerprint,
        prefix=prefix,
    )


def parse_config(text: str, *, source: Path | None = None) -> Config:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        where = source or "config"
        raise ConfigError(f"{where}: not valid TOML: {exc}") from exc
    base = source.parent if source else Path.cwd()
    raw_nodes = data.get("nodes", [])
    if not isinstance(raw_nodes, list):
        raise ConfigError("'nodes' must be an array of tables: [[nodes]]")
    nodes = tuple(_node(raw, i, base) for i, raw in enumerate(raw_nodes))
    names = [n.name for n in nodes]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ConfigError(f"node names must be unique; repeated: {', '.join(dupes)}")
    ui, store = _table(data, "ui"), _table(data, "store")
    refresh_s = ui.get("refresh_s", DEFAULT_REFRESH_S)
    if not isinstance(refresh_s, int | float) or isinstance(refresh_s, bool):
        raise ConfigError(f"ui.refresh_s must be a number of seconds, got {refresh_s!r}")
    if not 0.02 <= refresh_s <= 5:
        raise ConfigError(f"ui.refresh_s {refresh_s} out of range 0.02-5 s")
    db = os.environ.get("INFER_TOP_DB") or store.get("path")
    if db is not None and not isinstance(db, str):
        raise ConfigError(f"store.path must be a path string, got {db!r}")
    db_path = Path(db).expanduser() if db else default_db_path()
    try:
        alerts = parse_alert_config(data.get("alerts"))
    except AlertConfigError as exc:
        raise ConfigError(f"{source or 'config'}: {exc}") from exc
    try:
        prices = parse_prices(data.get("cost"))
    except CostConfigError as exc:
        raise ConfigError(f"{source or 'config'}: {exc}") from exc
    try:
        profiles = parse_profiles(_table(data, "load").get("profiles"))
    except ProfileConfigError as exc:
        raise ConfigError(f"{source or 'config'}: {exc}") from exc
    return Config(
        nodes=nodes,
        db_path=db_path,
        refresh_s=float(refresh_s),
        source=source,
        alerts=alerts,
        prices=prices,
        load_profiles=profiles,
    )


def _table(data: dict[str, object], key: str) -> dict[str, object]:
    value = data.get(key, {})
    if not isinstance(value, dict):
        raise ConfigError(f"[{key}] must be a table, got {value!r}")
    return value


def load_config(path: Path | None = None) -> Config:
    """The config at ``path`` (default: XDG / ``INFER_TOP_CONFIG``); empty when absent."""
    target = path or config_path()
    if not target.exists():
        if path is not None or os.environ.get("INFER_TOP_CONFIG"):
            raise ConfigError(f"config file {target} does not exist")
        return Config()
    try:
        text = target.read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read {target}: {exc.strerror}") from exc
    return parse_config(text, source=target)
