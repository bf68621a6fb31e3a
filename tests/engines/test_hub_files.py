"""Which files of a hub repository a pull fetches for an engine (engines.hub_files)."""

from __future__ import annotations

import pytest

from engines.hub_files import HubFile, HubFilesError, choose_files, parse_ref


def names(*files: str) -> list[HubFile]:
    return [HubFile(f, 1) for f in files]


def chosen(files: list[HubFile], weights: str, quant: str | None = None) -> list[str]:
    return [f.name for f in choose_files(files, weights, quant)]


def test_safetensors_without_the_other_formats_weights_nor_the_card() -> None:
    repo = names(
        ".gitattributes", "README.md", "config.json", "tokenizer.json",
        "model.safetensors.index.json", "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors", "pytorch_model.bin", "flax_model.msgpack",
        "onnx/model.onnx", "original/consolidated.00.pth",
    )  # fmt: skip
    assert chosen(repo, "safetensors") == [
        "config.json", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
        "model.safetensors.index.json", "tokenizer.json",
    ]  # fmt: skip


def test_a_repository_without_safetensors_gives_its_bin_weights() -> None:
    repo = names("config.json", "pytorch_model.bin", "tf_model.h5")
    assert chosen(repo, "safetensors") == ["config.json", "pytorch_model.bin"]
    with pytest.raises(HubFilesError, match=r"no safetensors or \.bin weights"):
        chosen(names("config.json", "model.gguf"), "safetensors")


def test_one_gguf_quantisation_with_a_split_files_parts_together() -> None:
    repo = names(
        "README.md", "m-Q4_K_M.gguf", "m-Q8_0-00001-of-00002.gguf", "m-Q8_0-00002-of-00002.gguf"
    )
    assert chosen(repo, "gguf", "q8_0") == [
        "m-Q8_0-00001-of-00002.gguf",
        "m-Q8_0-00002-of-00002.gguf",
    ]
    assert chosen(repo, "gguf", "Q4_K_M") == ["m-Q4_K_M.gguf"]
    with pytest.raises(HubFilesError, match=r"2 GGUF files: m-Q4_K_M.gguf, m-Q8_0.gguf"):
        chosen(repo, "gguf")
    with pytest.raises(HubFilesError, match="no GGUF file matches quantisation 'IQ2'"):
        chosen(repo, "gguf", "IQ2")
    assert chosen(names("only.gguf", "config.json"), "gguf") == ["only.gguf"]


def test_repo_references() -> None:
    assert parse_ref("Qwen/Qwen2.5-7B-Instruct") == ("Qwen/Qwen2.5-7B-Instruct", None)
    assert parse_ref("org/m:refs/pr/1") == ("org/m", "refs/pr/1")
    for bad in ("../etc", "org/..", "noslash", "a/b/c", "org/m:../x", "org/m:/x", "/abs/path"):
        with pytest.raises(ValueError):
            parse_ref(bad)
