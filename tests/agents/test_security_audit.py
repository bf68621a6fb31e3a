"""What the agent leaves behind and hands on: audit records that tell the outcome as the
caller saw it, an owner-only state dir, API keys kept out of answers and command lines,
native engines that inherit none of the agent's secrets, and swaps that check before
they stop anything.  The native-engine tests run the rig's real llama-server."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

import aiohttp
import pytest

from agents.client import AgentClient, AgentError
from agents.config import AgentConfig
from agents.embedded import embedded_agent
from agents.security import AuditLog


@pytest.fixture
def umask_022() -> Iterator[None]:
    """The usual umask: files are world-readable unless the agent says otherwise."""
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


async def test_a_failed_start_is_audited_as_failed_in_an_owner_only_state_dir(
    make_config: Callable[..., AgentConfig], tmp_path: Path, umask_022: None
) -> None:
    models = tmp_path / "models"
    models.mkdir()
    (models / "m.gguf").write_bytes(b"GGUF")
    config = make_config(native_binaries={"llamacpp": Path("/bin/false")}, model_dirs=(models,))
    launch = {"model": "m.gguf", "api_key": "sk-secret-0123"}
    async with embedded_agent(config) as (url, token), AgentClient(url, token) as client:
        with pytest.raises(AgentError) as info:  # the "engine" exits at once
            await client.start("llamacpp", launch, runtime="process")
        assert info.value.status == 502
        (engine,) = await client.engines()
        async with (
            aiohttp.ClientSession() as http,
            http.get(f"{url}/v1/engines", headers={"Authorization": f"Bearer {token}"}) as resp,
        ):
            listing = await resp.text()
        state = config.state_dir
        record = state / "deployments" / f"{engine.id}.json"
        log = state / "logs" / f"{engine.id}.log"
        assert {p.name: mode(p) for p in (state, state / "deployments", state / "logs")} == {
            "state": 0o700,
            "deployments": 0o700,
            "logs": 0o700,
        }
        assert {p.name: mode(p) for p in (config.audit_log, record, log)} == {
            "audit.log": 0o600,
            record.name: 0o600,
            log.name: 0o600,
        }
        argv = json.loads(record.read_text())["argv"]
        await client.stop(engine.id)
    # The API never shows the key back; the engine gets it by environment, not argv.
    assert engine.config["api_key"] == "<redacted>"
    assert "sk-secret-0123" not in listing and "sk-secret-0123" not in info.value.message
    assert "--api-key" not in argv and "sk-secret-0123" not in " ".join(argv)
    start, stop = AuditLog(config.audit_log).entries()
    assert (start["action"], start["outcome"], start["status"]) == ("start", "failed", 502)
    assert start["engine"] == engine.id and "did not start" in start["reason"]
    assert (stop["action"], stop["outcome"], stop["engine"]) == ("stop", "ok", engine.id)


async def test_an_older_world_readable_audit_log_is_tightened(
    make_config: Callable[..., AgentConfig], umask_022: None
) -> None:
    config = make_config()
    config.state_dir.mkdir(mode=0o755)
    config.audit_log.write_text("")
    config.audit_log.chmod(0o644)
    async with embedded_agent(config) as (url, token), AgentClient(url, token) as client:
        engine = await client.start("sim", {"profile": "h100-llama2-7b-vllm"})
        await client.stop(engine.id)
    assert (mode(config.state_dir), mode(config.audit_log)) == (0o700, 0o600)
    assert [e["engine"] for e in AuditLog(config.audit_log).entries()] == [engine.id] * 2


@pytest.fixture
def tiny_model(rig: object) -> Path:
    """The rig's model with symlinks resolved: the path the agent hands the engine."""
    return Path(rig.tiny_model).resolve()  # type: ignore[attr-defined]


def proc_file(pid: int, name: str) -> list[str]:
    return (Path(f"/proc/{pid}") / name).read_bytes().decode(errors="replace").split("\0")


def engine_pid(config: AgentConfig, engine_id: str) -> int:
    record = json.loads((config.state_dir / "deployments" / f"{engine_id}.json").read_text())
    return int(record["pid"])


@pytest.mark.docker  # the rig's llama-server binary and tiny model
async def test_a_native_engine_inherits_no_agent_secret_and_reads_its_key_from_env(
    rig: object,
    tiny_model: Path,
    make_config: Callable[..., AgentConfig],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    model = tiny_model
    monkeypatch.setenv("INFER_AGENT_TOKEN", "agent-token-must-not-leak-0123")
    monkeypatch.setenv("LLAMA_ARG_HOST", "0.0.0.0")  # meant for something else
    config = make_config(
        native_binaries={"llamacpp": rig.llama_server_bin},  # type: ignore[attr-defined]
        model_dirs=(model.parent,),
    )
    launch = {"model": model.name, "max_num_seqs": 1, "context_len": 128, "api_key": "sk-k3y"}
    launch["extra_args"] = ["--threads=1"]
    async with embedded_agent(config) as (url, token), AgentClient(url, token) as client:
        engine = await client.start("llamacpp", launch, runtime="process")
        try:
            assert engine.health == "healthy", engine.message
            pid = engine_pid(config, engine.id)
            env = dict(e.split("=", 1) for e in proc_file(pid, "environ") if "=" in e)
            argv = proc_file(pid, "cmdline")
            async with aiohttp.ClientSession() as http:
                async with http.get(f"{engine.url}/v1/models") as resp:
                    without_key = resp.status
                headers = {"Authorization": "Bearer sk-k3y"}
                async with http.get(f"{engine.url}/v1/models", headers=headers) as resp:
                    with_key = resp.status
        finally:
            await client.stop(engine.id)
    assert "INFER_AGENT_TOKEN" not in env and "LLAMA_ARG_HOST" not in env
    assert env["PATH"] == os.environ["PATH"] and env["LLAMA_API_KEY"] == "sk-k3y"
    assert "sk-k3y" not in argv and argv[argv.index("--host") + 1] == "127.0.0.1"
    assert argv[argv.index("-m") + 1] == str(model)  # resolved in the model dir
    assert argv[argv.index("--threads") + 1] == "1"
    assert (without_key, with_key) == (401, 200)  # the key from the environment is enforced


@pytest.mark.docker  # the rig's llama-server binary and tiny model
async def test_a_swap_that_cannot_start_stops_nothing(
    rig: object, tiny_model: Path, make_config: Callable[..., AgentConfig]
) -> None:
    model = tiny_model
    config = make_config(
        native_binaries={"llamacpp": rig.llama_server_bin},  # type: ignore[attr-defined]
        model_dirs=(model.parent,),
    )
    launch = {"model": str(model), "max_num_seqs": 1, "context_len": 128}
    async with embedded_agent(config) as (url, token), AgentClient(url, token) as client:
        engine = await client.start("llamacpp", launch, runtime="process")
        try:
            assert engine.health == "healthy", engine.message
            pid = engine_pid(config, engine.id)
            refusals = []
            for kind, swap_launch, options in (
                ("ollama", {"model": "llama3.1:8b"}, None),  # no native binary for it
                (None, {**launch, "extra_args": ["--host", "0.0.0.0"]}, None),
                (None, {**launch, "model": "../../../../etc/hostname"}, None),
                (None, launch, {"devices": ["/dev/sda"]}),
            ):
                with pytest.raises(AgentError) as info:
                    await client.swap(engine.id, swap_launch, kind=kind, options=options)
                refusals.append((info.value.status, info.value.message))
            (still,) = await client.engines()
            events = [e.kind for e in await client.recent_events()]
            assert engine_pid(config, engine.id) == pid
            os.kill(pid, 0)  # the very same process still runs
        finally:
            await client.stop(engine.id)
    assert (
        refusals[0] == (400, refusals[0][1])
        and "no native binary configured for 'ollama'" in (refusals[0][1])
    )
    assert [status for status, _ in refusals[1:]] == [403, 403, 400]
    assert (still.kind, still.health) == ("llamacpp", "healthy")
    assert still.config["model"] == str(model)
    assert events == ["starting", "started", "healthy"]  # nothing was stopped or started
