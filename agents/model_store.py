"""The models this node holds, and their removal by name (served by
``agents.model_routes``): the only code in infer-top that deletes a model.

Looked for under the model directories (``--model-dir``), the host cache directories
(``--cache-dir``: a Hugging Face cache, a native Ollama's store) and the named Docker
volumes the catalog's Compose files keep their caches in, read at their mountpoints.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterable
from pathlib import Path

from agents.config import AgentConfig
from agents.protocol import ModelInventory
from agents.runtime import Deployment
from agents.security import PolicyError
from engines.fit import FileShape, shape_from_files
from engines.model_files import LocalModel, ollama_blobs, scan_root


def volume_mountpoints(names: Iterable[str]) -> tuple[list[Path], list[str]]:
    """The host directories of the named Docker volumes that exist, and what could not be
    read (no daemon); a volume not created yet holds no models and is left out."""
    names = list(names)
    if not names:
        return [], []
    try:
        import docker
        from docker.errors import DockerException, NotFound

        client = docker.from_env(timeout=5)
    except Exception as exc:  # DockerException: no daemon on this node
        return [], [f"Docker volumes not listed ({', '.join(names)}): {exc}"]
    found: list[Path] = []
    problems: list[str] = []
    try:
        for name in names:
            try:
                found.append(Path(client.volumes.get(name).attrs["Mountpoint"]))
            except NotFound:
                continue
            except DockerException as exc:
                problems.append(f"Docker volume {name} not read: {exc}")
    finally:
        client.close()
    return found, problems


def inventory_roots(config: AgentConfig) -> tuple[list[Path], list[str]]:
    volumes, problems = volume_mountpoints(config.cache_volumes)
    roots: list[Path] = []
    for root in (*config.model_dirs, *config.cache_dirs, *volumes):
        resolved = root.expanduser().resolve()
        if resolved not in roots:
            roots.append(resolved)
    return roots, problems


def scan_inventory(config: AgentConfig) -> ModelInventory:
    """Every model under every root (blocking: run it in a thread)."""
    roots, problems = inventory_roots(config)
    models: list[LocalModel] = []
    for root in roots:
        try:
            models.extend(scan_root(root))
        except OSError as exc:
            problems.append(f"{root} not read: {exc}")
    return ModelInventory(
        node=config.node_name,
        models=tuple(models),
        roots=tuple(str(r) for r in roots),
        problems=tuple(problems),
    )


def model_matches(model: LocalModel, name: str, model_dir: str | None = None) -> bool:
    """Whether an engine started with ``model: name`` (and ``options.model_dir``, mounted
    into its container) runs ``model``: by its name, by its host path (or a file inside
    it), or by its path under the mounted directory."""
    if not name:
        return False
    if name == model.name:
        return True
    where = Path(model.path).resolve()
    wanted = Path(name).expanduser()
    if wanted.is_absolute():
        resolved = wanted.resolve()
        if resolved == where or resolved.is_relative_to(where):
            return True
    if model_dir:
        mounted = Path(model_dir).expanduser().resolve()
        if where.is_relative_to(mounted) and where != mounted:
            inside = where.relative_to(mounted).parts
            return wanted.parts[-len(inside) :] == inside
    return False


def engine_model_files(config: AgentConfig, dep: Deployment) -> FileShape | None:
    """The estimator's inputs from the files of the model ``dep`` runs, where this node
    holds it (blocking)."""
    name = str(dep.config.get("model") or "")
    for model in scan_inventory(config).models:
        if model_matches(model, name, dep.options.get("model_dir")):
            return shape_from_files(model)
    return None


def remove_model(model: LocalModel) -> None:
    """Delete ``model``'s files (blocking); its path is checked to lie strictly inside
    the root it was found under before anything goes."""
    root, path = Path(model.root), Path(model.path)
    if path.resolve() == root or not path.resolve().is_relative_to(root):
        raise PolicyError(f"{path} is not inside {root}: nothing removed")
    if model.source == "ollama":
        _remove_ollama(model, path)
    elif path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink()


def _remove_ollama(model: LocalModel, manifest: Path) -> None:
    """The tag's manifest, then the blobs no other manifest names (Ollama shares layers
    between tags)."""
    manifests = manifest.parents[3]
    base = manifests.parent
    mine = {p for _, p in ollama_blobs(base, manifest)}
    others: set[Path] = set()
    for other in manifests.rglob("*"):
        if other.is_file() and other != manifest:
            with contextlib.suppress(OSError, ValueError, KeyError):
                others.update(p for _, p in ollama_blobs(base, other))
    manifest.unlink()
    for blob in sorted(mine - others):
        with contextlib.suppress(FileNotFoundError):
            blob.unlink()
    with contextlib.suppress(OSError):  # empty tag folders up to manifests/
        for folder in manifest.parents[:3]:
            folder.rmdir()
