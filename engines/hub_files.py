"""Which files of a Hugging Face repository an engine needs (``infer-top models pull``).

A repository often holds the same weights several times: safetensors beside
``pytorch_model.bin`` (and Flax, TF, ONNX exports), or a GGUF file per quantisation.
An engine loads one of them, so a pull fetches only that: for a safetensors engine the
safetensors and every small file beside them (configs, tokenizer), never another
format's weights nor the model card; for a GGUF engine the files of one quantisation (a split GGUF's
``-00001-of-00003`` parts together).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import PurePosixPath

OTHER_WEIGHTS = (".bin", ".pt", ".pth", ".ckpt", ".h5", ".msgpack", ".onnx", ".ot", ".tflite")
"""Weights in a format other than safetensors and GGUF."""
NOT_LOADED = (".md", ".gitattributes", ".png", ".jpg", ".jpeg", ".gif", ".pdf")
"""The model card and its pictures: no engine reads them."""
_SPLIT = re.compile(r"-\d{5}-of-\d{5}\.gguf$", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class HubFile:
    name: str
    """The path in the repository (``config.json``, ``q4/model-Q4_K_M.gguf``)."""
    size_bytes: int


class HubFilesError(ValueError):
    """The repository holds nothing the engine can load, or the choice is ambiguous."""


def parse_ref(ref: str) -> tuple[str, str | None]:
    """``org/name[:revision]`` split; ValueError for anything that is no repo id."""
    repo, _, revision = ref.partition(":")
    parts = repo.split("/")
    if len(parts) != 2 or not all(re.fullmatch(r"[\w.-]+", p) and ".." not in p for p in parts):
        raise ValueError(f"{ref!r} is no Hugging Face repo id: give ORG/NAME[:REVISION]")
    return repo, check_revision(revision) if revision else None


def check_revision(revision: str) -> str:
    """A branch, tag or commit; ValueError for anything else (it names a file under the
    cache's ``refs/``)."""
    if ".." in revision or revision.startswith("/") or not re.fullmatch(r"[\w./-]+", revision):
        raise ValueError(f"{revision!r} is no revision: give a branch, tag or commit")
    return revision


def choose_files(
    files: Iterable[HubFile], weights_format: str, quant: str | None = None
) -> tuple[HubFile, ...]:
    """The files an engine loading ``weights_format`` needs, by name; HubFilesError in
    words (naming what the repository offers) when there are none or several GGUFs and
    no ``quant`` picks one."""
    every = sorted(files, key=lambda f: f.name)
    if weights_format == "gguf":
        return _one_gguf(every, quant)
    if quant:
        raise HubFilesError(f"a quantisation ({quant}) picks among GGUF files only")
    tensors = [f for f in every if _suffix(f) == ".safetensors"]
    weights = tensors or [f for f in every if _suffix(f) == ".bin"]
    if not weights:
        offered = ", ".join(f.name for f in every) or "no files"
        raise HubFilesError(f"no safetensors or .bin weights in the repository ({offered})")
    left_out = (*OTHER_WEIGHTS, *NOT_LOADED, ".safetensors", ".gguf")
    small = [f for f in every if _suffix(f) not in left_out and f.name not in NOT_LOADED]
    return tuple(sorted({*weights, *small}, key=lambda f: f.name))


def _one_gguf(every: list[HubFile], quant: str | None) -> tuple[HubFile, ...]:
    ggufs = [f for f in every if _suffix(f) == ".gguf"]
    if not ggufs:
        raise HubFilesError("no GGUF file in the repository: llama.cpp loads GGUF only")
    groups: dict[str, list[HubFile]] = {}
    for f in ggufs:
        groups.setdefault(_SPLIT.sub(".gguf", f.name), []).append(f)
    if quant:
        wanted = quant.lower()
        picked = [g for g in groups if wanted in PurePosixPath(g).name.lower()]
    else:
        picked = list(groups)
    if len(picked) == 1:
        return tuple(groups[picked[0]])
    offered = ", ".join(groups)
    if not picked:
        raise HubFilesError(f"no GGUF file matches quantisation {quant!r}; the repo has {offered}")
    raise HubFilesError(
        f"{len(picked)} GGUF files{' match ' + repr(quant) if quant else ''}: {offered}; "
        "name one with --quant (Q4_K_M, or the file's name)"
    )


def _suffix(f: HubFile) -> str:
    return PurePosixPath(f.name).suffix.lower()
