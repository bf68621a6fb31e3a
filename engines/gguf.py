"""Read a GGUF file's header: its metadata and tensor table, not its weights.

The layout (ggml ``docs/gguf.md``): the magic ``GGUF``, a uint32 version (2 and 3 are
read here; 1 used 32-bit counts and is long gone), the tensor count and the metadata
count as uint64, the metadata key/value pairs, then one entry per tensor (name, its
dimensions, its ggml type, its offset).  Little-endian only: a big-endian file is
refused in words rather than misread.  Only the header is read, a few hundred kilobytes
for a vocabulary of 150k tokens, whatever the size of the weights.
"""

from __future__ import annotations

import math
import struct
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

MAGIC = b"GGUF"
MAX_COUNT = 1 << 24
"""More tensors, keys or array items than this means a corrupt header, not a model."""
MAX_STRING = 1 << 26

_SCALARS: dict[int, str] = {
    0: "<B",  # uint8
    1: "<b",  # int8
    2: "<H",  # uint16
    3: "<h",  # int16
    4: "<I",  # uint32
    5: "<i",  # int32
    6: "<f",  # float32
    7: "<?",  # bool
    10: "<Q",  # uint64
    11: "<q",  # int64
    12: "<d",  # float64
}
_STRING, _ARRAY = 8, 9

FILE_TYPES: dict[int, str] = {
    0: "F32",
    1: "F16",
    2: "Q4_0",
    3: "Q4_1",
    7: "Q8_0",
    8: "Q5_0",
    9: "Q5_1",
    10: "Q2_K",
    11: "Q3_K_S",
    12: "Q3_K_M",
    13: "Q3_K_L",
    14: "Q4_K_S",
    15: "Q4_K_M",
    16: "Q5_K_S",
    17: "Q5_K_M",
    18: "Q6_K",
    19: "IQ2_XXS",
    20: "IQ2_XS",
    21: "Q2_K_S",
    22: "IQ3_XS",
    23: "IQ3_XXS",
    24: "IQ1_S",
    25: "IQ4_NL",
    26: "IQ3_S",
    27: "IQ3_M",
    28: "IQ2_S",
    29: "IQ2_M",
    30: "IQ4_XS",
    31: "IQ1_M",
    32: "BF16",
    36: "TQ1_0",
    37: "TQ2_0",
    38: "MXFP4_MOE",
}
"""``general.file_type`` (llama.cpp's ``llama_ftype``): the quantisation a file was made
with, as llama.cpp's quantize tool names it."""

TENSOR_TYPES: dict[int, str] = {
    0: "F32",
    1: "F16",
    2: "Q4_0",
    3: "Q4_1",
    6: "Q5_0",
    7: "Q5_1",
    8: "Q8_0",
    9: "Q8_1",
    10: "Q2_K",
    11: "Q3_K",
    12: "Q4_K",
    13: "Q5_K",
    14: "Q6_K",
    15: "Q8_K",
    16: "IQ2_XXS",
    17: "IQ2_XS",
    18: "IQ3_XXS",
    19: "IQ1_S",
    20: "IQ4_NL",
    21: "IQ3_S",
    22: "IQ2_S",
    23: "IQ4_XS",
    24: "I8",
    25: "I16",
    26: "I32",
    27: "I64",
    28: "F64",
    29: "IQ1_M",
    30: "BF16",
    34: "TQ1_0",
    35: "TQ2_0",
    39: "MXFP4",
}
"""``ggml_type`` of a tensor, for files whose metadata names no file type."""


class GgufError(ValueError):
    """Not a GGUF file, or one whose header is cut short or corrupt."""


@dataclass(frozen=True, slots=True)
class GgufHeader:
    version: int
    metadata: dict[str, object]
    """Every key but the tokenizer's arrays (vocabulary, scores, merges), kept short."""
    tensor_count: int
    param_count: int
    """Elements of all tensors: the model's parameters."""
    quantization: str
    """``general.file_type`` named (``Q4_K_M``), else the weights' most common tensor type."""

    @property
    def architecture(self) -> str | None:
        arch = self.metadata.get("general.architecture")
        return arch if isinstance(arch, str) else None

    def arch_int(self, key: str) -> int | None:
        """``<architecture>.<key>`` as an int (``block_count``), None where absent."""
        value = self.metadata.get(f"{self.architecture}.{key}")
        if isinstance(value, bool) or not isinstance(value, int):
            return None
        return value


class _Reader:
    def __init__(self, fh: BinaryIO, path: Path) -> None:
        self.fh, self.path = fh, path

    def take(self, n: int) -> bytes:
        data = self.fh.read(n)
        if len(data) != n:
            raise GgufError(f"{self.path}: the GGUF header is cut short")
        return data

    def scalar(self, fmt: str) -> object:
        value: object = struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]
        return value

    def count(self) -> int:
        n = int(struct.unpack("<Q", self.take(8))[0])
        if n > MAX_COUNT:
            raise GgufError(f"{self.path}: a count of {n} in the header: the file is corrupt")
        return n

    def string(self) -> str:
        n = int(struct.unpack("<Q", self.take(8))[0])
        if n > MAX_STRING:
            raise GgufError(f"{self.path}: a string of {n} bytes in the header: corrupt")
        return self.take(n).decode("utf-8", errors="replace")

    def value(self, vtype: int, keep: bool) -> object:
        if vtype in _SCALARS:
            return self.scalar(_SCALARS[vtype])
        if vtype == _STRING:
            return self.string()
        if vtype == _ARRAY:
            item_type = int(struct.unpack("<I", self.take(4))[0])
            n = self.count()
            if item_type in _SCALARS and not keep:  # skip fixed-size items in one seek
                self.fh.seek(n * struct.calcsize(_SCALARS[item_type]), 1)
                return None
            items = [self.value(item_type, keep) for _ in range(n)]
            return items if keep else None
        raise GgufError(f"{self.path}: unknown metadata value type {vtype}")


ARRAY_KEEP = 64
"""Metadata arrays longer than this (vocabularies) are skipped, not kept."""


def read_gguf_header(path: Path) -> GgufHeader:
    """The header of the GGUF file at ``path``; GgufError for anything else."""
    try:
        with path.open("rb") as fh:
            return _read(_Reader(fh, path))
    except struct.error as exc:
        raise GgufError(f"{path}: unreadable GGUF header: {exc}") from exc


def _read(r: _Reader) -> GgufHeader:
    if r.take(4) != MAGIC:
        raise GgufError(f"{r.path}: not a GGUF file (no GGUF magic)")
    version = int(struct.unpack("<I", r.take(4))[0])
    if version not in (2, 3):
        hint = " (a big-endian file?)" if version > 0xFFFF else ""
        raise GgufError(f"{r.path}: GGUF version {version} is not read here{hint}")
    tensors, kv_count = r.count(), r.count()
    metadata: dict[str, object] = {}
    for _ in range(kv_count):
        key = r.string()
        vtype = int(struct.unpack("<I", r.take(4))[0])
        keep = not key.startswith("tokenizer.ggml.")
        value = r.value(vtype, keep)
        if isinstance(value, list) and len(value) > ARRAY_KEEP:
            value = None
        if value is not None:
            metadata[key] = value
    params = 0
    types: Counter[int] = Counter()
    for _ in range(tensors):
        r.string()  # the tensor's name
        n_dims = int(struct.unpack("<I", r.take(4))[0])
        if n_dims > 8:
            raise GgufError(f"{r.path}: a tensor of {n_dims} dimensions: corrupt")
        dims = struct.unpack(f"<{n_dims}Q", r.take(8 * n_dims))
        ttype = int(struct.unpack("<I", r.take(4))[0])
        r.take(8)  # offset into the data section
        elements = math.prod(dims)
        params += elements
        if n_dims >= 2:  # the weight matrices say what the file was quantised to
            types[ttype] += elements
    return GgufHeader(version, metadata, tensors, params, _quantization(metadata, types))


def _quantization(metadata: dict[str, object], types: Counter[int]) -> str:
    file_type = metadata.get("general.file_type")
    if isinstance(file_type, int) and not isinstance(file_type, bool):
        return FILE_TYPES.get(file_type, f"file type {file_type}")
    if types:
        ttype = types.most_common(1)[0][0]
        return TENSOR_TYPES.get(ttype, f"ggml type {ttype}")
    return "unknown"
