"""``infer-top models pull``: the real agent fetches a model into its node's Hugging Face
cache through the real ``huggingface_hub`` client, pointed (``HF_ENDPOINT``) at a hub
stand-in served by the test on 127.0.0.1 (tests/hub_standin.py) that holds the rig's
tiny Hugging Face model and GGUF: only the files the engine loads, progress streamed,
a dropped connection resumed with ``Range``, refused before any byte when the disk is
too small or the hub refuses, cancellable; ``models ls`` then lists it."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from agents.client import AgentClient, AgentError
from agents.config import AgentConfig
from agents.embedded import embedded_agent
from agents.hub_pull import worker_env
from agents.protocol import ModelPull
from control.model_fetch import follow
from tests import disks
from tests.hub_standin import HubRepo, HubStandin, serve_hub
from tests.local_models import rig_hf_model
from tests.ports import free_port
from tests.waiting import apoll_until

from .test_engine_faults import engines_killed_afterwards
from .test_models_inventory import by_name, cli, write_node_config

REPO = "infer-top/tiny-llama"
COMMIT = "0123456789abcdef0123456789abcdef01234567"
HUB_TOKEN = "hf_test_token_of_the_lab"
HF_CHUNK_BYTES = 10 * 1024 * 1024
"""huggingface_hub's DOWNLOAD_CHUNK_SIZE: a file resumes from the chunks it wrote."""


def tiny_repo(model: Path) -> dict[str, bytes]:
    """The rig's tiny model as a hub repository holds such a model: its safetensors,
    configs and tokenizer, and the same weights again as a pytorch .bin and Flax."""
    files = {f.name: f.read_bytes() for f in sorted(model.iterdir())}
    files["pytorch_model.bin"] = files["model.safetensors"]
    files["flax_model.msgpack"] = files["model.safetensors"][:1000]
    files["README.md"] = b"# tiny\n"
    return files


@pytest.fixture
def hub_cache(tmp_path: Path) -> Path:
    path = tmp_path / "hf"
    path.mkdir()
    return path


@contextlib.asynccontextmanager
async def pulling_agent(
    make_config: Callable[..., AgentConfig],
    hub: HubStandin,
    cache: Path,
    monkeypatch: pytest.MonkeyPatch,
    **config: object,
) -> AsyncIterator[tuple[str, AgentClient]]:
    """The hub stand-in and a real agent whose --cache-dir is ``cache`` (and ``config``),
    its huggingface_hub (and its workers') pointed at the stand-in."""
    async with serve_hub(hub):
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        monkeypatch.delenv("HF_TOKEN", raising=False)
        monkeypatch.setenv("HF_HOME", str(cache.parent / "hf-home"))  # no stored token
        agent = make_config(cache_dirs=(cache,), cache_volumes=(), **config)
        async with embedded_agent(agent) as (url, token), AgentClient(url, token) as client:
            yield url, client


async def follow_all(client: AgentClient, pull: ModelPull) -> list[ModelPull]:
    seen = [pull]
    async with asyncio.timeout(120):
        async for step in client.follow_pull(pull.id):
            seen.append(step)
    return seen


async def test_a_pull_fetches_only_the_engines_files_with_progress_and_ls_lists_it(
    make_config: Callable[..., AgentConfig],
    hub_cache: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    model, params = rig_hf_model()
    files = tiny_repo(model)
    weights = len(files["model.safetensors"])
    hub = HubStandin({REPO: HubRepo(files, commit=COMMIT)}, rate_bytes_per_s=weights / 3)
    async with pulling_agent(make_config, hub, hub_cache, monkeypatch) as (url, client):
        pull = await client.pull_model(REPO, engine="vllm")
        wanted = sorted(f.name for f in model.iterdir())
        assert sorted(pull.files) == wanted  # no .bin, Flax or README
        assert pull.total_bytes == sum(len(files[n]) for n in wanted)
        seen = await follow_all(client, pull)
        final = seen[-1]
        assert final.state == "done", final.message
        # the bytes arrived over time: a reading between none and all, with a rate
        assert any(0 < s.done_bytes < final.total_bytes for s in seen[1:-1]), seen  # type: ignore[operator]
        assert any(s.rate_bytes_per_s for s in seen if s.state == "pulling"), seen
        assert final.done_bytes == final.total_bytes
        assert {f for m, f, _ in hub.requests if m == "GET"} == set(wanted)

        snapshot = hub_cache / "hub" / f"models--{REPO.replace('/', '--')}" / "snapshots" / COMMIT
        assert final.path == str(snapshot)
        for name in wanted:
            assert (snapshot / name).read_bytes() == files[name]
        assert not (snapshot / "pytorch_model.bin").exists()

        cfg = str(write_node_config(tmp_path / "c.toml", url, tmp_path / "token"))
        code, out, err = await cli(capsys, "models", "ls", "--config", cfg, "--json")
        assert code == 0, err
        listed = json.loads(out)["nodes"][0]
        from agents.protocol import model_inventory_from_dict

        found = by_name(model_inventory_from_dict(listed), REPO)
        assert found.format == "safetensors" and found.revision == COMMIT
        assert found.arch is not None and found.arch.param_count == params

        # pulled again: nothing is fetched, nothing is needed
        gets = len(hub.requests)
        again = await follow_all(client, await client.pull_model(REPO, engine="vllm"))
        assert again[0].done_bytes == again[0].total_bytes
        assert again[-1].state == "done"
        assert not [r for r in hub.requests[gets:] if r[0] == "GET"]


async def test_the_cli_pulls_one_gguf_quantisation_which_then_serves_on_llama_server(
    rig: object,
    make_config: Callable[..., AgentConfig],
    hub_cache: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    tiny = await asyncio.to_thread(Path(rig.tiny_model).read_bytes)  # type: ignore[attr-defined]
    binary: Path = rig.llama_server_bin  # type: ignore[attr-defined]
    files = {"tiny-Q8_0.gguf": tiny, "tiny-F16.gguf": tiny + b"\0" * 10, "README.md": b"#\n"}
    hub = HubStandin({"org/tiny-GGUF": HubRepo(files)})
    # the cache is also a model directory: a native llama.cpp may open its files
    native = {"native_binaries": {"llamacpp": binary}, "model_dirs": (hub_cache,)}
    with engines_killed_afterwards(tmp_path / "state", str(binary)):
        async with pulling_agent(make_config, hub, hub_cache, monkeypatch, **native) as (
            url,
            client,
        ):
            cfg = str(write_node_config(tmp_path / "c.toml", url, tmp_path / "token"))
            args = ("models", "pull", "org/tiny-GGUF", "--engine", "llamacpp", "--config", cfg)
            code, _, err = await cli(capsys, *args)
            assert code == 4
            assert "2 GGUF files" in err and "tiny-F16.gguf" in err and "--quant" in err
            assert not hub.requests

            code, out, err = await cli(capsys, *args, "--quant", "q8_0")
            assert code == 0, err
            assert "org/tiny-GGUF: 7.5 MiB on node n1" in out
            assert "7.9/7.9 MB" in err  # the progress bar's bytes (decimal units), on stderr
            assert {f for m, f, _ in hub.requests if m == "GET"} == {"tiny-Q8_0.gguf"}
            code, listed, _ = await cli(capsys, "models", "ls", "--config", cfg)
            assert "org/tiny-GGUF" in listed and "gguf" in listed

            gguf = out.split("its GGUF file on the node: ")[1].strip()
            launch = {"model": gguf, "context_len": 256}
            engine = await client.start("llamacpp", launch, runtime="process")
            assert engine.health == "healthy", engine.message
            await client.stop(engine.id)


async def test_a_connection_dropped_mid_file_resumes_with_a_range_request(
    make_config: Callable[..., AgentConfig],
    hub_cache: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # past one chunk: huggingface_hub resumes from what it wrote, chunk by chunk
    weights = uuid.uuid4().bytes * ((HF_CHUNK_BYTES * 3 // 2) // 16)
    files = {"config.json": b"{}", "model.safetensors": weights}
    cut = HF_CHUNK_BYTES + HF_CHUNK_BYTES // 4
    hub = HubStandin({"org/big": HubRepo(files)}, cut_once={"model.safetensors": cut})
    async with pulling_agent(make_config, hub, hub_cache, monkeypatch) as (_, client):
        final = (await follow_all(client, await client.pull_model("org/big")))[-1]
        assert final.state == "done", final.message
        first, second = hub.file_gets("model.safetensors")
        assert first is None
        assert second == f"bytes={HF_CHUNK_BYTES}-"
        blob = Path(final.path or "") / "model.safetensors"
        assert hashlib.sha256(blob.read_bytes()).digest() == hashlib.sha256(weights).digest()
        # what had arrived was kept: the dropped part only came again
        assert hub.sent_bytes < len(weights) + HF_CHUNK_BYTES


async def test_a_disk_too_small_is_refused_before_any_byte_is_fetched(
    make_config: Callable[..., AgentConfig],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    files = {"config.json": b"{}", "model.safetensors": b"\1" * (3 * 1024 * 1024)}
    hub = HubStandin({"org/too-big": HubRepo(files)})
    with disks.small_disk(tmp_path / "disk", "2m") as disk:
        async with pulling_agent(make_config, hub, disk, monkeypatch) as (url, _):
            cfg = str(write_node_config(tmp_path / "c.toml", url, tmp_path / "token"))
            code, _, err = await cli(capsys, "models", "pull", "org/too-big", "--config", cfg)
            assert code == 1
            assert "org/too-big needs 3.0 MiB more" in err
            assert "2.0 MiB free" in err and "nothing was downloaded" in err
            assert not [r for r in hub.requests if r[0] == "GET"]
            assert not list(disk.rglob("*.safetensors*"))


async def test_cancel_stops_the_pull_and_the_next_pull_keeps_the_files_complete(
    make_config: Callable[..., AgentConfig],
    hub_cache: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    files = {"config.json": b"{}", "model.safetensors": b"\2" * (4 * 1024 * 1024)}
    hub = HubStandin({"org/slow": HubRepo(files)}, rate_bytes_per_s=256 * 1024)
    async with pulling_agent(make_config, hub, hub_cache, monkeypatch) as (_, client):
        pull = await client.pull_model("org/slow")
        snapshots = hub_cache / "hub" / "models--org--slow" / "snapshots"
        # the small file is complete (linked into its snapshot) before the cancel
        await apoll_until(lambda: any(snapshots.rglob("config.json")), "config.json complete")
        await apoll_until(lambda: hub.sent_bytes > 2, "the weights to start flowing")
        with pytest.raises(AgentError) as twice:
            await client.pull_model("org/slow")
        assert twice.value.status == 409 and pull.id in twice.value.message
        cancelled = await client.cancel_pull(pull.id)
        assert cancelled.state == "cancelled"
        sent = hub.sent_bytes
        blobs = hub_cache / "hub" / "models--org--slow" / "blobs"
        assert not list(blobs.glob("*.incomplete"))  # no partial file left behind
        assert sent < len(files["model.safetensors"])
        listed = (await follow_all(client, cancelled))[-1]
        assert listed.state == "cancelled"

        hub.rate_bytes_per_s = None
        final = (await follow_all(client, await client.pull_model("org/slow")))[-1]
        assert final.state == "done", final.message
        assert hub.file_gets("config.json") == [None]  # complete before the cancel: kept


async def test_the_hubs_refusals_reach_the_operator_in_its_words(
    make_config: Callable[..., AgentConfig],
    hub_cache: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    files = {"config.json": b"{}", "model.safetensors": b"\3" * 1000}
    hub = HubStandin({"org/gated": HubRepo(files, token=HUB_TOKEN)})
    async with pulling_agent(make_config, hub, hub_cache, monkeypatch) as (url, client):
        cfg = str(write_node_config(tmp_path / "c.toml", url, tmp_path / "token"))
        monkeypatch.setenv("HF_TOKEN", "hf_not_the_right_one")
        code, _, err = await cli(capsys, "models", "pull", "org/gated", "--config", cfg)
        assert code == 4
        assert "org/gated is gated and the hub refused this token" in err
        assert "Access to model org/gated is restricted" in err  # the hub's own words
        assert not [r for r in hub.requests if r[0] == "GET"]

        code, _, err = await cli(capsys, "models", "pull", "org/nothing-here", "--config", cfg)
        assert code == 4
        assert f"no repository org/nothing-here on {hub.url}: Repository not found" in err
        code, _, err = await cli(capsys, "models", "pull", "org/gated:v9", "--config", cfg)
        assert code == 4 and "org/gated has no revision 'v9'" in err
        code, _, err = await cli(capsys, "models", "pull", "../etc", "--config", cfg)
        assert code == 4 and "no Hugging Face repo id" in err
        with pytest.raises(AgentError) as outside:  # a revision names a file under refs/
            await client.pull_model("org/gated", revision="../../../escape")
        assert outside.value.status == 400 and "is no revision" in outside.value.message

        monkeypatch.setenv("HF_TOKEN", HUB_TOKEN)
        code, _, err = await cli(capsys, "models", "pull", "org/gated", "--config", cfg)
        assert code == 0, err
        # the token went to the hub, never into the agent's audit log
        audit = (tmp_path / "state" / "audit.log").read_text()
        assert "model-pull" in audit and HUB_TOKEN not in audit

        nobody = f"http://127.0.0.1:{free_port()}"  # a hub that does not answer
        monkeypatch.setenv("HF_ENDPOINT", nobody)
        with pytest.raises(AgentError) as silent:
            await client.pull_model("org/other")
        assert silent.value.status == 502
        assert f"the hub at {nobody} did not answer: ConnectError" in silent.value.message


async def test_a_start_whose_model_is_not_on_the_node_says_so_and_pulls_it_on_request(
    make_config: Callable[..., AgentConfig],
    hub_cache: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    model, _ = rig_hf_model()
    hub = HubStandin({REPO: HubRepo(tiny_repo(model), commit=COMMIT)})
    async with pulling_agent(make_config, hub, hub_cache, monkeypatch) as (url, client):
        cfg = str(write_node_config(tmp_path / "c.toml", url, tmp_path / "token"))
        # a simulated vLLM stands for the engine: the check is the operator's side's
        start = ("engine", "start", "vllm", "--model", REPO, "--config", cfg, "--runtime", "sim",
                 "--set", "profile=h100-llama2-7b-vllm", "--set", "time_scale=0.01")  # fmt: skip
        code, _, err = await cli(capsys, *start)
        assert code == 4
        assert f"model {REPO} is not on node testnode: pull it first" in err
        assert f"infer-top models pull {REPO} --node <node> --engine vllm" in err
        assert not await client.engines() and not hub.requests  # nothing started or fetched

        code, out, err = await cli(capsys, *start, "--pull")
        assert code == 0, err
        assert "2.3/2.3 MB" in err  # the pull's progress bar
        assert "healthy" in out
        (engine,) = await client.engines()
        found = await client.models()
        assert [m.name for m in found.models if m.source == "hf-cache"] == [REPO]

        # there now: a start asks nothing more
        gets = len(hub.requests)
        code, _, err = await cli(capsys, *start)
        assert code == 0, err
        assert len(hub.requests) == gets
        for e in await client.engines():
            await client.stop(e.id)
        assert engine.kind == "vllm"


async def test_a_follower_that_leaves_cancels_the_pull_on_the_node(
    make_config: Callable[..., AgentConfig],
    hub_cache: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What Ctrl-C does to ``models pull`` (asyncio.run cancels its task) and leaving the
    Engines screen to its "pull and start"."""
    files = {"config.json": b"{}", "model.safetensors": b"\4" * (4 * 1024 * 1024)}
    hub = HubStandin({"org/left": HubRepo(files)}, rate_bytes_per_s=256 * 1024)
    async with pulling_agent(make_config, hub, hub_cache, monkeypatch) as (_, client):
        pull = await client.pull_model("org/left")
        following = asyncio.create_task(follow(client, pull, quiet=True))
        await apoll_until(lambda: hub.sent_bytes > 0, "the weights to start flowing")
        following.cancel()
        with pytest.raises(asyncio.CancelledError):
            await following
        (listed,) = await client.pulls()
        assert (listed.id, listed.state) == (pull.id, "cancelled")


def test_the_pulls_worker_gets_the_hub_settings_and_never_the_agents_token(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("INFER_AGENT_TOKEN", "the-agents-own-bearer-token")
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:1")
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:3128")
    monkeypatch.setenv("HF_TOKEN", "the-agents-hub-token")
    env = worker_env(None)
    assert "INFER_AGENT_TOKEN" not in env
    assert env["HF_ENDPOINT"] == "http://127.0.0.1:1" and env["HTTPS_PROXY"]
    assert env["HF_TOKEN"] == "the-agents-hub-token"  # no operator's: the node's own
    assert worker_env(HUB_TOKEN)["HF_TOKEN"] == HUB_TOKEN
