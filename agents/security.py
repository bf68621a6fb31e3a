"""Security by default: bearer-token auth on every route but the liveness probe,
a policy for what a start request may ask for, and an audit log of every
control action."""

from __future__ import annotations

import hmac
import json
import logging
import os
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from pathlib import Path
from typing import IO, Any

from aiohttp import web
from aiohttp.typedefs import Middleware

from agents.catalog_adapter import extra_args_problem, get_spec, start_options_problem
from agents.config import AgentConfig
from engines.catalog import ENV_UNSAFE_CHARS

PUBLIC_ROUTES = frozenset({"/healthz"})
"""The only route without a token: a bare liveness probe that tells nothing."""

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def token_ok(header: str | None, token: str) -> bool:
    if not header or not header.startswith("Bearer "):
        return False
    try:
        presented = header[7:].strip().encode()
    except UnicodeEncodeError:  # bytes that are not UTF-8 (aiohttp keeps them as surrogates)
        return False
    # Constant time, so response timing does not leak the token prefix.
    return hmac.compare_digest(presented, token.encode())


def auth_middleware(token: str) -> Middleware:
    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path in PUBLIC_ROUTES:
            return await handler(request)
        if not token_ok(request.headers.get("Authorization"), token):
            return web.json_response(
                {"error": "missing or wrong bearer token"},
                status=401,
                headers={"WWW-Authenticate": 'Bearer realm="infer-agent"'},
            )
        return await handler(request)

    return middleware


class PolicyError(Exception):
    """A start request the agent refuses; the message says why and what is allowed."""


OPTION_KEYS = (
    *("model_dir", "pid", "ipc", "network_mode", "privileged", "cap_add", "volumes"),
    *("placement", "replicas"),
)
"""What a start request's ``options`` may hold: the host directory mounted for models,
the container settings the policy judges (most of them only to refuse), and where and
how many (Swarm: ``{"node": NAME}`` / ``{"label": "K=V"}``, a replica count)."""

SECRET_CONFIG_KEYS = frozenset({"api_key"})
"""Launch settings the API never shows back (engine lists, start and swap answers)."""


def redacted(config: Mapping[str, Any]) -> dict[str, Any]:
    """A launch config as the API shows it: secrets replaced, their presence kept."""
    return {k: "<redacted>" if k in SECRET_CONFIG_KEYS and v else v for k, v in config.items()}


def _under(path: Path, roots: Iterable[Path]) -> bool:
    resolved = path.resolve()
    return any(resolved.is_relative_to(root.expanduser().resolve()) for root in roots)


def check_start_request(
    config: AgentConfig,
    kind: str,
    launch: Mapping[str, Any],
    options: Mapping[str, Any],
    *,
    declared: Mapping[str, str] | None = None,
    default_image: str | None = None,
    model_on_host: bool = False,
) -> dict[str, Any]:
    """Refuse what the operator did not allow; return the launch settings the engine is
    given.  ``declared`` holds the engine's Compose file's own ``pid`` / ``ipc`` modes
    (vLLM declares ``ipc: host``); ``model_on_host``: a native engine opens ``model`` on
    this host, so it is resolved inside the model directories."""
    declared = declared or {}
    if unknown := sorted(set(options) - set(OPTION_KEYS)):
        raise ValueError(
            f"unknown option(s) {', '.join(unknown)}: nothing was started "
            f"(known options: {', '.join(OPTION_KEYS)})"
        )
    if kind not in config.allowed_engines:
        allowed = ", ".join(sorted(config.allowed_engines)) or "none"
        raise PolicyError(f"engine {kind!r} is not allow-listed on this agent (allowed: {allowed})")
    # With an image allow-list, the image run (asked for or the catalog's default) must be
    # on it; without one, only the catalog's default image runs.
    image = launch.get("image") or default_image
    allowed_images = config.allowed_images or (
        frozenset({default_image}) if default_image else frozenset()
    )
    if image is not None and image not in allowed_images:
        allowed = ", ".join(sorted(str(i) for i in allowed_images)) or "none"
        raise PolicyError(
            f"image {image!r} is not allow-listed on this agent (allowed: {allowed}; "
            "add it with --allow-image)"
        )
    for source in (options, launch):
        if source.get("privileged"):
            raise PolicyError("privileged mode is refused: an engine never needs it")
        if source.get("cap_add"):
            raise PolicyError("extra capabilities (cap_add) are refused")
        for ns in ("pid", "ipc", "network_mode"):
            value = source.get(ns)
            if value and value != declared.get(ns):
                raise PolicyError(
                    f"{ns}: {value!r} is refused: only what the engine's Compose file declares "
                    f"({declared.get(ns) or 'nothing'}) is allowed"
                )
    host_paths = [str(m).split(":", 1)[0] for m in options.get("volumes", ()) or ()]
    if options.get("model_dir"):
        host_paths.append(str(options["model_dir"]))
    for host in host_paths:
        _check_host_path(config, host)
    if options.get("volumes"):
        raise PolicyError(
            "extra volumes are not supported: set options.model_dir, mounted where the "
            "engine's Compose file keeps its models"
        )
    if launch.get("extra_args"):
        if problem := extra_args_problem(get_spec(kind), launch["extra_args"]):
            raise PolicyError(problem)
    if problem := start_options_problem(kind, dict(launch)):
        raise ValueError(f"{problem}; nothing was started")
    if model_on_host and "model" in launch:
        return {**launch, "model": host_model_path(config, launch["model"])}
    return dict(launch)


def host_model_path(config: AgentConfig, model: object) -> str:
    """The file a native engine opens for ``model``: ``~`` expanded, a relative path
    taken inside the model directories, symlinks resolved; refused anywhere else (the
    engine runs as root, and relative paths would otherwise follow the agent's cwd)."""
    if not isinstance(model, str) or not model:
        raise ValueError("model must be a path inside the model directories")
    path = Path(model).expanduser()
    candidates = (
        [path] if path.is_absolute() else [d.expanduser() / path for d in config.model_dirs]
    )
    inside = [c.resolve() for c in candidates if _under(c, config.model_dirs)]
    if not inside:
        dirs = ", ".join(str(d) for d in config.model_dirs) or "none configured"
        raise PolicyError(
            f"model {model!r} is outside the model directories ({dirs}; add one with --model-dir)"
        )
    return str(next((p for p in inside if p.exists()), inside[0]))


HOST_PATH_UNSAFE_CHARS = ENV_UNSAFE_CHARS | {":", ","}
"""What a mounted host path may not hold: it reaches Compose's environment (MODEL_CACHE)
and a volume's ``source:target`` spelling."""


def _check_host_path(config: AgentConfig, host: str) -> None:
    if bad := HOST_PATH_UNSAFE_CHARS.intersection(host):
        raise PolicyError(
            f"host path {host!r} holds {''.join(sorted(bad))!r}: a mounted directory's name "
            "may not hold quotes, '$', '`', '\\', ':', ',', line ends or NUL"
        )
    if "docker.sock" in host:
        raise PolicyError("mounting the Docker socket is refused")
    if not host.startswith(("/", "~")):
        raise PolicyError(f"{host!r}: only absolute host paths inside the model directories")
    if not config.model_dirs or not _under(Path(host).expanduser(), config.model_dirs):
        dirs = ", ".join(str(d) for d in config.model_dirs) or "none configured"
        raise PolicyError(
            f"host path {host!r} is outside the model directories ({dirs}; "
            "add one with --model-dir)"
        )


def private_dir(path: Path) -> Path:
    """``path`` as a directory only its owner can list or enter (0700, tightened where an
    older agent left it open): the state dir holds API keys, engine logs, the audit log."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    path.chmod(0o700)
    return path


def open_private(path: Path, mode: str) -> IO[Any]:
    """Open ``path`` for writing, readable by its owner only (0600, tightened where an
    older agent created it with the umask's bits)."""
    flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if "a" in mode else os.O_TRUNC)
    fd = os.open(path, flags, 0o600)
    try:
        os.fchmod(fd, 0o600)
        return os.fdopen(fd, mode)
    except BaseException:
        os.close(fd)
        raise


class AuditLog:
    """One JSON line per control action (who, what, outcome); never the token."""

    def __init__(self, path: Path) -> None:
        self.path = path
        private_dir(path.parent)

    def record(self, action: str, remote: str | None, outcome: str, **details: Any) -> None:
        entry = {
            "ts": time.time(),
            "action": action,
            "remote": remote,
            "outcome": outcome,
            **details,
        }
        try:
            with open_private(self.path, "a") as fh:
                fh.write(json.dumps(entry, default=str) + "\n")
        except OSError as exc:  # a full disk must not stop the control action's answer
            logging.getLogger(__name__).error("audit log %s: %s", self.path, exc)

    def entries(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        return [json.loads(line) for line in self.path.read_text().splitlines() if line.strip()]
