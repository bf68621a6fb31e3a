"""The models a node holds, read from their files by the real agent: the rig's tiny GGUF
in a model directory and the rig's tiny Hugging Face model in a Hugging Face cache (a
Docker volume of the test's own, read at its mountpoint through the Docker API), checked
against the files with independent readers (the ``gguf`` package, ``config.json``, the
parameter count the rig's generator printed); the fit shown for them is the estimator
fed those numbers by hand; ``models rm`` deletes exactly the model named, never one a
running engine uses."""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import hashlib
import io
import json
import re
import shutil
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import gguf
import pytest

from agents.client import AgentClient, AgentError
from agents.config import AgentConfig
from agents.embedded import embedded_agent
from agents.protocol import ModelInventory
from control.engine_ops import fit_text, fit_view
from engines.fit import GIB, ModelShape, estimate_fit, shape_from_files
from engines.gguf import GgufError, read_gguf_header
from engines.model_files import LocalModel
from tests.local_models import REPO, REVISION, hf_cache_of, rig_hf_model
from tui.cli import main as cli_main

from .conftest import TOKEN
from .test_engine_faults import engines_killed_afterwards


@contextlib.contextmanager
def volume_of_the_test() -> Iterator[tuple[str, Path]]:
    import docker

    client = docker.from_env(timeout=30)
    volume = client.volumes.create(f"itest-models-{uuid.uuid4().hex[:8]}")
    try:
        yield volume.name, Path(volume.attrs["Mountpoint"])
    finally:
        volume.remove(force=True)
        client.close()


def size_of(path: Path) -> int:
    return path.stat().st_size


def by_name(found: ModelInventory, name: str) -> LocalModel:
    named = [m for m in found.models if m.name == name]
    assert len(named) == 1, [m.name for m in found.models]
    return named[0]


def write_node_config(path: Path, url: str, token_file: Path) -> Path:
    token_file.write_text(TOKEN)
    token_file.chmod(0o600)
    path.write_text(f'[[nodes]]\nname = "n1"\nurl = "{url}"\ntoken_file = "{token_file}"\n')
    return path


async def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """``infer-top ARGV`` (it runs its own event loop: in a thread) and what it printed."""
    code = await asyncio.to_thread(cli_main, list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_the_gguf_header_reader_agrees_with_the_gguf_package(rig: object) -> None:
    path: Path = rig.tiny_model  # type: ignore[attr-defined]
    header = read_gguf_header(path)
    reference = gguf.GGUFReader(path)
    file_type = reference.fields["general.file_type"].contents()
    assert gguf.LlamaFileType(file_type).name.endswith(f"_{header.quantization}")
    assert header.param_count == sum(int(t.n_elements) for t in reference.tensors)
    assert header.tensor_count == len(reference.tensors)
    for key in ("llama.block_count", "llama.embedding_length", "llama.context_length"):
        assert header.metadata[key] == reference.fields[key].contents()


def test_a_file_that_is_no_gguf_is_refused_in_words(tmp_path: Path, rig: object) -> None:
    fake = tmp_path / "fake.gguf"
    fake.write_bytes(b"PK\x03\x04" + bytes(60))
    with pytest.raises(GgufError, match="not a GGUF file"):
        read_gguf_header(fake)
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(rig.tiny_model.read_bytes()[:200])  # type: ignore[attr-defined]
    with pytest.raises(GgufError, match="cut short"):
        read_gguf_header(cut)


@pytest.mark.docker
async def test_the_rig_models_are_listed_as_their_files_state_them(
    rig: object,
    make_config: Callable[..., AgentConfig],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    hf_model, hf_params = rig_hf_model()
    tiny: Path = rig.tiny_model  # type: ignore[attr-defined]
    models = tmp_path / "models"
    models.mkdir()
    shutil.copyfile(tiny, models / "tiny.gguf")
    with volume_of_the_test() as (volume, mountpoint):
        hf_bytes = hf_cache_of(hf_model, mountpoint)
        config = make_config(model_dirs=(models,), cache_volumes=(volume,))
        async with embedded_agent(config) as (url, token), AgentClient(url, token) as client:
            found = await client.models()
            cfg = write_node_config(tmp_path / "c.toml", url, tmp_path / "token")
            code, out, err = await cli(capsys, "models", "ls", "--config", str(cfg), "--json")
            assert code == 0, err
            listed = json.loads(out)["nodes"][0]["models"]
            code, text, _ = await cli(capsys, "models", "ls", "--config", str(cfg))
    assert str(mountpoint) in found.roots and not found.problems

    g = by_name(found, "tiny.gguf")
    reference = gguf.GGUFReader(tiny)
    field = {k: f.contents() for k, f in reference.fields.items() if not k.startswith("tok")}
    assert (g.format, g.quantization, g.source) == ("gguf", "F16", "file")
    assert gguf.LlamaFileType(field["general.file_type"]).name == "MOSTLY_F16"
    assert g.size_bytes == size_of(tiny)
    assert g.arch is not None
    assert g.arch.layers == field["llama.block_count"]
    assert g.arch.hidden_size == field["llama.embedding_length"]
    assert g.arch.attention_heads == field["llama.attention.head_count"]
    assert g.arch.kv_heads == field["llama.attention.head_count_kv"]
    assert g.arch.head_dim == field["llama.embedding_length"] // field["llama.attention.head_count"]
    assert g.arch.max_context == field["llama.context_length"]
    assert g.arch.param_count == sum(int(t.n_elements) for t in reference.tensors)

    h = by_name(found, REPO)
    stated = json.loads((hf_model / "config.json").read_text())
    assert (h.format, h.source, h.revision, h.quantization) == (
        "safetensors",
        "hf-cache",
        REVISION,
        None,
    )
    assert h.size_bytes == hf_bytes == sum(f.stat().st_size for f in hf_model.iterdir())
    assert h.arch is not None
    assert h.arch.layers == stated["num_hidden_layers"]
    assert h.arch.hidden_size == stated["hidden_size"]
    assert h.arch.attention_heads == stated["num_attention_heads"]
    assert h.arch.kv_heads == stated["num_key_value_heads"]
    assert h.arch.head_dim == stated["head_dim"]
    assert h.arch.max_context == stated["max_position_embeddings"]
    assert h.arch.dtype == stated.get("torch_dtype", stated.get("dtype"))
    assert h.arch.param_count == hf_params

    assert {m["name"]: m["size_bytes"] for m in listed} == {
        m.name: m.size_bytes for m in found.models
    }
    assert re.search(r"tiny\.gguf\s+-\s+gguf F16\s+7\.5 MiB\s+4L h256 4/4 heads d64 ctx 4096", text)
    assert re.search(rf"{REPO}\s+{REVISION[:12]}\s+safetensors float32", text)

    # point 2: the fit the start form shows is the estimator fed the files' numbers by hand
    gpus = [80 * GIB, 80 * GIB]
    by_hand = ModelShape(REPO, hf_params / 1e9, 2, 2, 32, 128, 4, 2048)
    est = estimate_fit(
        by_hand,
        "vllm",
        context_len=2048,
        gpu_mem_total_bytes=80 * GIB,
        tp=2,
        concurrent_seqs=8,
        weight_dtype="fp32",  # the config's dtype: float32
    )
    view = fit_view("vllm", REPO, gpus, 2048, files=shape_from_files(h), concurrent_seqs=8)
    assert view.text == f"{fit_text(est, 2048, 8)} (from the node's files)"
    gguf_by_hand = ModelShape("tiny.gguf", g.arch.param_count / 1e9, 4, 4, 64, 256, 4, 4096)
    est = estimate_fit(
        gguf_by_hand, "llamacpp", context_len=512, gpu_mem_total_bytes=80 * GIB, weight_dtype="fp16"
    )
    view = fit_view("llamacpp", "tiny.gguf", gpus[:1], 512, files=shape_from_files(g))
    assert view.text == f"{fit_text(est, 512)} (from the node's files)"


@pytest.mark.docker
async def test_rm_removes_exactly_the_model_named_and_never_one_in_use(
    rig: object,
    make_config: Callable[..., AgentConfig],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    hf_model, _ = rig_hf_model()
    tiny: Path = rig.tiny_model  # type: ignore[attr-defined]
    binary: Path = rig.llama_server_bin  # type: ignore[attr-defined]
    models, cache = tmp_path / "models", tmp_path / "hf"
    models.mkdir()
    for name in ("tiny.gguf", "other.gguf"):
        shutil.copyfile(tiny, models / name)
    hf_cache_of(hf_model, cache)
    config = make_config(
        native_binaries={"llamacpp": binary},
        model_dirs=(models,),
        cache_dirs=(cache,),
        cache_volumes=(),
    )
    with engines_killed_afterwards(config.state_dir, str(binary)):
        async with embedded_agent(config) as (url, token), AgentClient(url, token) as client:
            cfg = str(write_node_config(tmp_path / "c.toml", url, tmp_path / "token"))
            launch = {"model": str(models / "tiny.gguf"), "context_len": 256}
            engine = await client.start("llamacpp", launch, runtime="process")
            assert engine.health == "healthy", engine.message
            # the fit estimator's check of the running engine read the shape from the files
            assert engine.kv_capacity is not None

            code, _, err = await cli(capsys, "models", "rm", "tiny.gguf", "--config", cfg, "--yes")
            assert code == 4
            assert f"model tiny.gguf is in use by llamacpp engine {engine.id}" in err
            assert "nothing removed" in err
            # the path names it too, and is refused the same
            with pytest.raises(AgentError) as refused:
                await client.remove_model(str(models / "tiny.gguf"))
            assert refused.value.status == 409
            for outside in ("../../etc/passwd", "/etc/passwd", str(tiny), "models--x"):
                with pytest.raises(AgentError) as unknown:
                    await client.remove_model(outside)
                assert unknown.value.status == 404 and "nothing removed" in unknown.value.message
            assert (models / "tiny.gguf").exists()

            await client.stop(engine.id)
            # no terminal to ask on: refused in words, nothing removed
            monkeypatch.setattr(sys, "stdin", io.StringIO())
            code, _, err = await cli(capsys, "models", "rm", "tiny.gguf", "--config", cfg)
            assert code == 2 and "add --yes" in err and (models / "tiny.gguf").exists()
            # asked on a terminal, naming the model and its size; "no" keeps it
            asked: list[str] = []
            monkeypatch.setattr(sys.stdin, "isatty", lambda: True)
            monkeypatch.setattr(builtins, "input", lambda prompt: asked.append(prompt) or "n")
            code, _, err = await cli(capsys, "models", "rm", "tiny.gguf", "--config", cfg)
            size = f"{size_of(tiny) / 2**20:.1f} MiB"
            assert asked == [
                f"remove model tiny.gguf ({size}, {models / 'tiny.gguf'}) from node n1? [y/N] "
            ]
            assert code == 0 and "nothing removed" in err and (models / "tiny.gguf").exists()

            code, out, _ = await cli(capsys, "models", "rm", "tiny.gguf", "--config", cfg, "--yes")
            assert code == 0 and f"removed tiny.gguf ({size}" in out
            code, out, _ = await cli(
                capsys, "models", "rm", REPO, "--config", cfg, "--yes", "--json"
            )
            assert code == 0 and json.loads(out)["removed"]["name"] == REPO
            left = await client.models()

    assert [m.name for m in left.models] == ["other.gguf"]
    assert not (models / "tiny.gguf").exists() and (models / "other.gguf").exists()
    assert not (cache / "hub" / f"models--{REPO.replace('/', '--')}").exists()
    assert (cache / "hub").is_dir() and size_of(tiny) > 0  # the rig's own file untouched
    audit = [json.loads(line) for line in config.audit_log.read_text().splitlines()]
    removals = [(e["outcome"], e["status"]) for e in audit if e["action"] == "model-remove"]
    assert removals == [("failed", 409), ("failed", 409)] + [("failed", 404)] * 4 + [
        ("ok", 200),
        ("ok", 200),
    ]
    done = [e for e in audit if e["action"] == "model-remove" and e["outcome"] == "ok"]
    assert done[0]["path"] == str(models / "tiny.gguf")
    assert done[0]["size_bytes"] == size_of(tiny)


def ollama_store(root: Path, gguf_file: Path) -> dict[str, Path]:
    """Ollama's store under ``root/models``: two tags sharing the weights, each with a
    config of its own (as ``ollama pull`` leaves them); the blob paths by role."""
    base = root / "models"
    (base / "blobs").mkdir(parents=True)

    def blob(data: bytes) -> dict[str, object]:
        digest = hashlib.sha256(data).hexdigest()
        (base / "blobs" / f"sha256-{digest}").write_bytes(data)
        return {"digest": f"sha256:{digest}", "size": len(data)}

    weights = blob(gguf_file.read_bytes())
    paths = {"weights": base / "blobs" / str(weights["digest"]).replace(":", "-")}
    for tag in ("latest", "chat"):
        config = blob(json.dumps({"tag": tag}).encode())
        paths[tag] = base / "blobs" / str(config["digest"]).replace(":", "-")
        manifest = {
            "schemaVersion": 2,
            "config": {"mediaType": "application/vnd.docker.container.image.v1+json", **config},
            "layers": [{"mediaType": "application/vnd.ollama.image.model", **weights}],
        }
        folder = base / "manifests" / "registry.ollama.ai" / "library" / "tiny"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / tag).write_text(json.dumps(manifest))
    return paths


async def test_ollama_tags_are_listed_and_rm_keeps_the_layers_another_tag_uses(
    rig: object, make_config: Callable[..., AgentConfig], tmp_path: Path
) -> None:
    tiny: Path = rig.tiny_model  # type: ignore[attr-defined]
    blobs = ollama_store(tmp_path / "ollama", tiny)
    config = make_config(cache_dirs=(tmp_path / "ollama",), cache_volumes=())
    async with embedded_agent(config) as (url, token), AgentClient(url, token) as client:
        found = await client.models()
        latest = by_name(found, "tiny:latest")
        assert (latest.source, latest.format, latest.quantization) == ("ollama", "gguf", "F16")
        assert latest.size_bytes == size_of(blobs["weights"]) + size_of(blobs["latest"])
        assert latest.arch is not None and latest.arch.layers == 4
        removed = await client.remove_model("tiny:latest")
        assert removed.name == "tiny:latest"
        left = await client.models()
    assert [m.name for m in left.models] == ["tiny:chat"]
    assert not blobs["latest"].exists()
    assert blobs["weights"].exists() and blobs["chat"].exists()  # the other tag's


def test_the_kv_capacity_estimate_takes_the_shape_from_the_files(rig: object) -> None:
    """A model the name table does not know is estimated from its files when present."""
    from engines.catalog import LaunchConfig
    from engines.fit import estimated_kv_capacity
    from engines.model_files import scan_root

    hf_model, params = rig_hf_model()
    [model] = [m for m in scan_root(hf_model.parent) if m.path == str(hf_model)]
    cfg = LaunchConfig(model="/models/tiny", context_len=2048)
    assert estimated_kv_capacity("vllm", cfg, 80 * GIB) == (
        None,
        "the estimator knows no shape for '/models/tiny'",
    )
    files = shape_from_files(model)
    tokens, basis = estimated_kv_capacity("vllm", cfg, 80 * GIB, files)
    by_hand = ModelShape("tiny", params / 1e9, 2, 2, 32, 128, 4, 2048)
    est = estimate_fit(by_hand, "vllm", context_len=2048, gpu_mem_total_bytes=80 * GIB,
                       weight_dtype="fp32")  # fmt: skip
    assert (tokens, basis) == (
        est.kv_capacity_tokens,
        "fit estimator, shape from the model's files",
    )


async def test_ls_over_the_fleet_lists_what_answers_and_names_the_node_that_did_not(
    make_config: Callable[..., AgentConfig], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.ports import free_port

    config = make_config(model_dirs=(tmp_path / "empty",), cache_volumes=())
    async with embedded_agent(config) as (url, _):
        cfg = write_node_config(tmp_path / "c.toml", url, tmp_path / "token")
        cfg.write_text(
            cfg.read_text() + f'[[nodes]]\nname = "gone"\nurl = "http://127.0.0.1:{free_port()}"\n'
            f'token_file = "{tmp_path / "token"}"\n'
        )
        code, out, err = await cli(capsys, "models", "ls", "--config", str(cfg), "--json")
        text_code, text, _ = await cli(capsys, "models", "ls", "--config", str(cfg))
    answer = json.loads(out)
    assert code == text_code == 0 and answer["ok"] is False
    assert [n["node"] for n in answer["nodes"]] == ["n1"] and answer["nodes"][0]["models"] == []
    assert [e["node"] for e in answer["errors"]] == ["gone"] and "node gone" in err
    assert f"none under {tmp_path / 'empty'}" in text


def test_a_model_directory_given_as_the_root_is_listed_by_its_name(rig: object) -> None:
    """``--model-dir /models/tiny`` where that folder is the saved model itself (as the
    vLLM rig mounts it): listed under the folder's name, never "."."""
    from engines.model_files import scan_root

    hf_model, params = rig_hf_model()
    [model] = scan_root(hf_model)
    assert (model.name, model.path, model.format) == ("model", str(hf_model), "safetensors")
    assert model.arch is not None and model.arch.param_count == params
