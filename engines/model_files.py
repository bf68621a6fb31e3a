"""The models a directory holds, read from the files themselves.

Three layouts are recognised wherever they are found under a root (a model directory,
a host cache directory, a Docker volume's mountpoint):

* a Hugging Face hub cache (``models--org--name/{blobs,refs,snapshots}``, at the root or
  under ``hub/``), one model per repository;
* Ollama's store (``manifests/<registry>/<namespace>/<model>/<tag>`` beside ``blobs/``,
  at the root or under ``models/``), one model per tag, its weights a GGUF blob;
* plain files: every ``*.gguf``, and every directory holding ``config.json`` beside
  ``*.safetensors`` (a model saved with ``save_pretrained``).

The architecture comes from ``config.json`` or the GGUF header, the parameter count from
the safetensors headers or the GGUF tensor table, the size from the bytes on disk.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import struct
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from engines.gguf import GgufError, GgufHeader, read_gguf_header

WALK_DEPTH = 4
"""How deep under a root plain model files are looked for."""
SAFETENSORS_HEADER_MAX = 100 * 1024 * 1024
OLLAMA_MODEL_LAYER = "application/vnd.ollama.image.model"
OLLAMA_LIBRARY = ("registry.ollama.ai", "library")


@dataclass(frozen=True, slots=True)
class ModelArch:
    """The figures the fit estimator needs, as the model's files state them."""

    architecture: str | None = None
    layers: int | None = None
    hidden_size: int | None = None
    attention_heads: int | None = None
    kv_heads: int | None = None
    head_dim: int | None = None
    max_context: int | None = None
    dtype: str | None = None
    """``torch_dtype`` of a safetensors model; a GGUF file's quantisation."""
    param_count: int | None = None


@dataclass(frozen=True, slots=True)
class LocalModel:
    name: str
    """What an engine start names: the repo id (``org/name``), the Ollama tag
    (``llama3.2:latest``), or the path under its root (``tiny.gguf``)."""
    source: str
    """hf-cache | ollama | file"""
    format: str
    """safetensors | gguf | pytorch | unknown"""
    path: str
    """The file or directory the model is, on the node."""
    root: str
    """The directory it was found under."""
    size_bytes: int
    revision: str | None = None
    """The Hugging Face commit (``refs/main``), or the Ollama manifest's digest (12 hex)."""
    quantization: str | None = None
    """GGUF only: ``general.file_type`` named (``Q4_K_M``)."""
    arch: ModelArch | None = None
    problem: str | None = None
    """Why the architecture could not be read (a cut-short header...)."""


def size_text(n_bytes: int) -> str:
    """A size as the inventory shows it (binary units)."""
    for unit, scale in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if n_bytes >= scale:
            return f"{n_bytes / scale:.1f} {unit}"
    return f"{n_bytes} B"


def scan_root(root: Path) -> list[LocalModel]:
    """Every model under ``root``, sorted by name; [] when ``root`` is no directory."""
    if not root.is_dir():
        return []
    found: list[LocalModel] = []
    handled: set[Path] = set()
    for base in (root, root / "hub"):
        if not base.is_dir():
            continue
        for repo in sorted(base.glob("models--*")):
            if repo.is_dir():
                handled.add(repo)
                found.append(_hf_repo(repo, root))
    for base in (root, root / "models"):
        if (base / "manifests").is_dir() and (base / "blobs").is_dir():
            handled.update({base / "manifests", base / "blobs"})
            found.extend(_ollama_models(base, root))
    for path in _walk(root, handled):
        if path.suffix == ".gguf":
            found.append(_gguf_file(path, root))
        else:
            found.append(_model_dir(path, root))
    return sorted(found, key=lambda m: (m.name, m.path))


def _walk(root: Path, skip: set[Path]) -> Iterator[Path]:
    """GGUF files and saved model directories under ``root`` (bounded depth, no symlinked
    directories followed: a link could lead out of the root)."""
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        depth = len(here.relative_to(root).parts)
        dirnames[:] = sorted(d for d in dirnames if here / d not in skip and depth < WALK_DEPTH)
        if "config.json" in filenames and any(f.endswith(".safetensors") for f in filenames):
            dirnames[:] = []  # a model directory's subfolders are its own
            yield here
            continue
        for name in sorted(filenames):
            if name.endswith(".gguf") and (here / name).is_file():
                yield here / name


def _file_bytes(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    total = 0
    for dirpath, _, filenames in os.walk(path):
        for name in filenames:
            p = Path(dirpath) / name
            if not p.is_symlink():  # a hub snapshot's links point at blobs counted once
                total += p.stat().st_size
    return total


def _gguf_file(path: Path, root: Path) -> LocalModel:
    header, arch, problem = _gguf_facts(path)
    return LocalModel(
        name=str(path.relative_to(root)),
        source="file",
        format="gguf",
        path=str(path),
        root=str(root),
        size_bytes=path.stat().st_size,
        quantization=header.quantization if header else None,
        arch=arch,
        problem=problem,
    )


def _gguf_facts(path: Path) -> tuple[GgufHeader | None, ModelArch | None, str | None]:
    try:
        header = read_gguf_header(path)
    except (GgufError, OSError) as exc:
        return None, None, str(exc)
    return header, gguf_arch(header), None


def gguf_arch(header: GgufHeader) -> ModelArch:
    layers = header.arch_int("block_count")
    hidden = header.arch_int("embedding_length")
    heads = header.arch_int("attention.head_count")
    kv_heads = header.arch_int("attention.head_count_kv")
    if kv_heads is None:
        per_layer = header.metadata.get(f"{header.architecture}.attention.head_count_kv")
        if isinstance(per_layer, list) and per_layer:  # one figure per layer (hybrid models)
            kv_heads = max(int(n) for n in per_layer if isinstance(n, int))
    head_dim = header.arch_int("attention.key_length")
    if head_dim is None and hidden and heads:
        head_dim = hidden // heads
    return ModelArch(
        architecture=header.architecture,
        layers=layers,
        hidden_size=hidden,
        attention_heads=heads,
        kv_heads=kv_heads if kv_heads is not None else heads,
        head_dim=head_dim,
        max_context=header.arch_int("context_length"),
        dtype=header.quantization,
        param_count=header.param_count,
    )


def _model_dir(path: Path, root: Path) -> LocalModel:
    fmt, quant, arch, problem = _weights_facts(path)
    return LocalModel(
        # a model directory given as the root itself goes by its folder's name
        name=str(path.relative_to(root)) if path != root else path.name,
        source="file",
        format=fmt,
        path=str(path),
        root=str(root),
        size_bytes=_file_bytes(path),
        quantization=quant,
        arch=arch,
        problem=problem,
    )


def _hf_repo(repo: Path, root: Path) -> LocalModel:
    """One hub cache repository: its ``refs/main`` snapshot (else the newest one)."""
    name = repo.name.removeprefix("models--").replace("--", "/")
    revision = None
    ref = repo / "refs" / "main"
    if ref.is_file():
        revision = ref.read_text().strip() or None
    snapshots = repo / "snapshots"
    snapshot = snapshots / revision if revision else None
    if snapshot is None or not snapshot.is_dir():
        found = sorted(
            (s for s in snapshots.glob("*") if s.is_dir()), key=lambda s: s.stat().st_mtime
        )
        snapshot = found[-1] if found else None
        revision = snapshot.name if snapshot else revision
    fmt, quant, arch, problem = (
        _weights_facts(snapshot) if snapshot else ("unknown", None, None, "no snapshot")
    )
    return LocalModel(
        name=name,
        source="hf-cache",
        format=fmt,
        path=str(repo),
        root=str(root),
        size_bytes=_file_bytes(repo / "blobs"),  # every revision's: what a removal frees
        revision=revision,
        quantization=quant,
        arch=arch,
        problem=problem,
    )


def _weights_facts(folder: Path) -> tuple[str, str | None, ModelArch | None, str | None]:
    """Format, quantisation, architecture and any problem of a model's folder."""
    files = sorted(p for p in folder.iterdir() if p.is_file())
    tensors = [p for p in files if p.suffix == ".safetensors"]
    ggufs = [p for p in files if p.suffix == ".gguf"]
    if ggufs and not tensors:
        headers = [_gguf_facts(p) for p in ggufs]
        quants = sorted({h.quantization for h, _, _ in headers if h})
        return "gguf", ", ".join(quants) or None, headers[0][1], headers[0][2]
    fmt = (
        "safetensors"
        if tensors
        else "pytorch"
        if any(p.suffix == ".bin" for p in files)
        else "unknown"
    )
    config = folder / "config.json"
    if not config.is_file():
        return fmt, None, None, f"no config.json in {folder}"
    try:
        data = json.loads(config.read_text())
        params = sum(safetensors_params(p) for p in tensors) if tensors else None
    except (OSError, ValueError) as exc:
        return fmt, None, None, f"{config.parent}: {exc}"
    if not isinstance(data, dict):
        return fmt, None, None, f"{config} is not a JSON object"
    return fmt, None, config_arch(data, params), None


def config_arch(config: Mapping[str, object], param_count: int | None = None) -> ModelArch:
    """The architecture a Hugging Face ``config.json`` states (a multimodal model's
    ``text_config`` for the language model)."""
    text = config.get("text_config")
    merged: Mapping[str, object] = {**config, **text} if isinstance(text, dict) else config

    def num(key: str) -> int | None:
        value = merged.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    hidden, heads = num("hidden_size"), num("num_attention_heads")
    head_dim = num("head_dim") or (hidden // heads if hidden and heads else None)
    kv_heads = num("num_key_value_heads")
    archs = config.get("architectures")
    dtype = merged.get("torch_dtype") or merged.get("dtype")
    return ModelArch(
        architecture=archs[0] if isinstance(archs, list) and archs else None,
        layers=num("num_hidden_layers"),
        hidden_size=hidden,
        attention_heads=heads,
        kv_heads=kv_heads if kv_heads is not None else heads,
        head_dim=head_dim,
        max_context=num("max_position_embeddings"),
        dtype=dtype if isinstance(dtype, str) else None,
        param_count=param_count,
    )


def safetensors_params(path: Path) -> int:
    """Elements of every tensor in a safetensors file, from its JSON header."""
    with path.open("rb") as fh:
        raw = fh.read(8)
        if len(raw) != 8:
            raise ValueError(f"{path}: too short for a safetensors header")
        (length,) = struct.unpack("<Q", raw)
        if length > SAFETENSORS_HEADER_MAX:
            raise ValueError(f"{path}: a {length}-byte safetensors header: corrupt")
        header = json.loads(fh.read(length))
    if not isinstance(header, dict):
        raise ValueError(f"{path}: the safetensors header is not an object")
    return sum(
        math.prod(int(n) for n in t["shape"])
        for key, t in header.items()
        if key != "__metadata__" and isinstance(t, dict)
    )


def _ollama_models(base: Path, root: Path) -> Iterator[LocalModel]:
    manifests = base / "manifests"
    for manifest in sorted(p for p in manifests.rglob("*") if p.is_file()):
        parts = manifest.relative_to(manifests).parts
        if len(parts) != 4:
            continue
        registry, namespace, model, tag = parts
        name = (
            f"{model}:{tag}"
            if (registry, namespace) == OLLAMA_LIBRARY
            else f"{registry}/{namespace}/{model}:{tag}"
        )
        yield _ollama_model(base, root, manifest, name)


def ollama_blobs(base: Path, manifest: Path) -> list[tuple[str, Path]]:
    """(media type, blob path) of every layer and the config a manifest names."""
    data = json.loads(manifest.read_text())
    layers = [*data.get("layers", []), data.get("config") or {}]
    return [
        (str(layer.get("mediaType", "")), base / "blobs" / str(layer["digest"]).replace(":", "-"))
        for layer in layers
        if isinstance(layer, dict) and layer.get("digest")
    ]


def _ollama_model(base: Path, root: Path, manifest: Path, name: str) -> LocalModel:
    digest = hashlib.sha256(manifest.read_bytes()).hexdigest()[:12]
    try:
        blobs = ollama_blobs(base, manifest)
    except (OSError, ValueError, KeyError) as exc:
        return LocalModel(
            name, "ollama", "unknown", str(manifest), str(root), 0, digest, problem=str(exc)
        )
    size = sum(p.stat().st_size for _, p in blobs if p.is_file())
    weights = next((p for kind, p in blobs if kind == OLLAMA_MODEL_LAYER), None)
    header, arch, problem = _gguf_facts(weights) if weights else (None, None, "no model layer")
    return LocalModel(
        name=name,
        source="ollama",
        format="gguf",
        path=str(manifest),
        root=str(root),
        size_bytes=size,
        revision=digest,
        quantization=header.quantization if header else None,
        arch=arch,
        problem=problem,
    )
