"""Pulling a Hugging Face repository into the node's cache (``POST
/v1/models-inventory/pull``): planned here before any byte moves, fetched by
``agents.hub_worker`` in a process of its own (so a cancel stops it at once).

The plan asks the hub (``huggingface_hub``, ``HF_ENDPOINT`` for a mirror) for the
repository's files and their sizes, keeps the ones the engine loads
(``engines.hub_files``), checks the token reaches them (a gated repository refuses here,
in the hub's words), and refuses when the cache's file system has less room than the
files not yet cached need.  The files land in the Hugging Face cache layout
(``models--org--name/{blobs,snapshots,refs}``) that the inventory reads and the Compose
engines mount.
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from agents.config import AgentConfig
from agents.manager import ManagerError
from agents.model_store import volume_mountpoints
from engines.hub_files import HubFile, HubFilesError, choose_files
from engines.model_files import size_text

HF_CACHE_VOLUME = "infer-top-hf-cache"
"""The Compose engines' Hugging Face cache (mounted at /root/.cache/huggingface)."""
HUB_TIMEOUT_S = 30.0
ERROR_CHARS = 400


@dataclass(frozen=True, slots=True)
class HubPlan:
    repo: str
    revision: str
    commit: str
    files: tuple[HubFile, ...]
    cache_dir: Path
    """The hub cache folder (``.../hub``) that ``models--org--name`` goes in."""
    present_bytes: int
    """Of the files' bytes, already cached at ``commit``."""

    @property
    def total_bytes(self) -> int:
        return sum(f.size_bytes for f in self.files)

    @property
    def repo_dir(self) -> Path:
        return self.cache_dir / ("models--" + self.repo.replace("/", "--"))


def pull_cache(config: AgentConfig) -> Path:
    """Where pulled models go: the engines' ``infer-top-hf-cache`` volume where Docker
    has it (the Compose engines read their models there), else the first
    ``--cache-dir`` (its ``hub/`` folder, as ``HF_HOME`` keeps it, unless it is a hub
    folder itself); ManagerError when the node has neither."""
    if HF_CACHE_VOLUME in config.cache_volumes:
        volumes, _ = volume_mountpoints([HF_CACHE_VOLUME])
        if volumes:
            return volumes[0] / "hub"
    for root in config.cache_dirs:
        root = root.expanduser().resolve()
        if root.name == "hub" or any(root.glob("models--*")):
            return root
        return root / "hub"
    raise ManagerError(
        409,
        f"node {config.node_name} has no Hugging Face cache to pull into: start its agent "
        f"with --cache-dir DIR, or create the engines' volume (docker volume create "
        f"{HF_CACHE_VOLUME})",
    )


def hub_words(exc: Exception) -> str:
    """What the hub said (its ``X-Error-Message`` or JSON ``error``), else the error."""
    server = getattr(exc, "server_message", None)
    text = str(server or exc).strip()
    return re.sub(r"\s+", " ", text)[:ERROR_CHARS]


def plan_pull(
    config: AgentConfig,
    repo: str,
    revision: str | None,
    weights_format: str,
    quant: str | None,
    token: str | None,
) -> HubPlan:
    """Ask the hub what to fetch and check it fits (blocking: run it in a thread);
    ManagerError in words for anything that stops the pull before it starts."""
    import httpx2
    from huggingface_hub import HfApi, get_hf_file_metadata, hf_hub_url, try_to_load_from_cache
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    cache = pull_cache(config)
    revision = revision or "main"
    where = f"{repo}@{revision}"
    # read now, as the worker will: not the value huggingface_hub took at its import
    api = HfApi(endpoint=os.environ.get("HF_ENDPOINT") or None, token=token or None)
    try:
        info = api.model_info(repo, revision=revision, files_metadata=True, timeout=HUB_TIMEOUT_S)
        commit = info.sha or revision
        offered = [HubFile(s.rfilename, s.size or 0) for s in info.siblings or ()]
        files = choose_files(offered, weights_format, quant)
        # the metadata is public even where the files are gated: ask for one file
        url = hf_hub_url(repo, files[0].name, revision=commit, endpoint=api.endpoint)
        get_hf_file_metadata(url, token=token or None, timeout=HUB_TIMEOUT_S)
    except HubFilesError as exc:
        raise ManagerError(422, f"{where}: {exc}") from None
    except GatedRepoError as exc:
        raise ManagerError(
            424,  # the hub's refusal, not the agent's policy (403)
            f"{repo} is gated and the hub refused this token: {hub_words(exc)} "
            "(pass a token with access: HF_TOKEN=... infer-top models pull)",
        ) from None
    except RevisionNotFoundError as exc:
        raise ManagerError(404, f"{repo} has no revision {revision!r}: {hub_words(exc)}") from None
    except RepositoryNotFoundError as exc:
        raise ManagerError(
            404,
            f"no repository {repo} on {api.endpoint}: {hub_words(exc)} (check the name; a "
            "private repository needs a token)",
        ) from None
    except HfHubHTTPError as exc:
        raise ManagerError(502, f"the hub refused {where}: {hub_words(exc)}") from None
    except (httpx2.HTTPError, OSError) as exc:  # huggingface_hub's transport's, a socket's
        raise ManagerError(
            502, f"the hub at {api.endpoint} did not answer: {type(exc).__name__}: {exc}"
        ) from None
    present = sum(
        f.size_bytes
        for f in files
        if isinstance(try_to_load_from_cache(repo, f.name, cache_dir=cache, revision=commit), str)
    )
    plan = HubPlan(repo, revision, commit, files, cache, present)
    _check_room(config, plan)
    return plan


def _check_room(config: AgentConfig, plan: HubPlan) -> None:
    needed = plan.total_bytes - plan.present_bytes
    existing = plan.cache_dir
    while not existing.exists():
        existing = existing.parent
    free = shutil.disk_usage(existing).free
    if needed > free:
        raise ManagerError(
            507,
            f"{plan.repo} needs {size_text(needed)} more in {plan.cache_dir} on node "
            f"{config.node_name}, which has {size_text(free)} free: nothing was downloaded "
            "(free room, e.g. infer-top models rm, or choose a smaller quantisation)",
        )


def blob_bytes(plan: HubPlan) -> int:
    """The bytes in the repository's blobs folder now, partial downloads included."""
    total = 0
    for blob in (plan.repo_dir / "blobs").glob("*"):
        try:
            total += blob.stat().st_size
        except FileNotFoundError:  # a partial file renamed to its blob meanwhile
            continue
    return total


def partial_files(plan: HubPlan) -> set[Path]:
    return set((plan.repo_dir / "blobs").glob("*.incomplete"))


WORKER_ENV = (
    "PATH", "HOME", "LANG", "LC_ALL", "TZ", "TMPDIR", "PYTHONPATH",
    "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE",
    "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY",
    "http_proxy", "https_proxy", "no_proxy", "all_proxy",
)  # fmt: skip
"""The agent's variables a pull's worker inherits, beside huggingface_hub's own (``HF_*``):
what reaching the hub takes, never the agent's token."""


def worker_env(token: str | None) -> dict[str, str]:
    """The worker's environment: the agent's hub settings (``HF_ENDPOINT``, proxies), the
    operator's token where one came, no progress bars."""
    env = {k: v for k, v in os.environ.items() if k in WORKER_ENV or k.startswith("HF_")}
    env["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
    if token:
        env["HF_TOKEN"] = token
    return env
