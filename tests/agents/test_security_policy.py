"""What a start or swap request may carry, over real HTTP on loopback: extra arguments
pass each engine's allow-list, native model paths stay inside the model directories,
unknown fields and ill-typed values are refused before any record exists, and a token
that is not UTF-8 is just a wrong token."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from agents.client import AgentClient, AgentError
from agents.config import AgentConfig
from agents.embedded import embedded_agent
from agents.security import AuditLog
from engines.catalog import LaunchConfig, UnsupportedOption, all_specs, get_spec

from .conftest import TOKEN

AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
async def native_agent(
    make_config: Callable[..., AgentConfig], tmp_path: Path
) -> AsyncIterator[tuple[str, AgentClient, AgentConfig]]:
    """An agent whose process runtime may run llama.cpp (a binary that exits at once:
    every request here must be refused before it would run)."""
    models = tmp_path / "models"
    models.mkdir()
    (models / "tiny.gguf").write_bytes(b"GGUF")
    config = make_config(
        native_binaries={"llamacpp": Path("/bin/false")},
        model_dirs=(models,),
        allowed_engines=frozenset({"llamacpp", "sim"}),
    )
    async with embedded_agent(config) as (url, token), AgentClient(url, token) as client:
        yield url, client, config


async def refused(client: AgentClient, status: int, *args: Any, **kwargs: Any) -> str:
    """Start with these arguments: refused with ``status``, nothing recorded."""
    with pytest.raises(AgentError) as info:
        await client.start(*args, **kwargs)
    assert info.value.status == status, info.value.message
    assert await client.engines() == []
    assert [e.kind for e in await client.recent_events()] == []  # nothing ran
    return info.value.message


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        (["--host", "0.0.0.0"], "'--host' is refused"),
        (["--host=0.0.0.0"], "'--host=0.0.0.0' is refused"),
        (["--port", "80"], "'--port' is refused"),
        (["-m", "/etc/shadow"], "'-m' is refused"),
        (["--log-file", "/etc/cron.d/x"], "'--log-file' is refused"),
        (["--api-key-file", "/etc/shadow"], "'--api-key-file' is refused"),
        (["/etc/shadow"], "'/etc/shadow' is refused"),
        (["--threads", "2", "-t", "3"], "-t is given twice"),
        (["--threads=two"], "--threads 'two': the value must be an integer in 1..1024"),
        (["--threads"], "--threads needs a value"),
        (["--no-warmup=1"], "--no-warmup takes no value"),
        (["--flash-attn", "maybe"], "must be one of on, off, auto"),
    ],
)
async def test_extra_args_pass_the_engines_allow_list(
    native_agent: tuple[str, AgentClient, AgentConfig], extra: list[str], words: str
) -> None:
    _, client, config = native_agent
    launch = {"model": "tiny.gguf", "extra_args": extra}
    for runtime in ("process", "compose"):
        message = await refused(client, 403, "llamacpp", launch, runtime=runtime)
        assert words in message
    if "refused" in words:  # the refusal says what is allowed instead
        assert "--threads" in message and "--ubatch-size" in message
    entries = [e for e in AuditLog(config.audit_log).entries() if e["action"] == "start"]
    assert [e["outcome"] for e in entries] == ["refused", "refused"]


@pytest.mark.parametrize(
    ("option", "words"),
    [
        ({"chunked_prefill": False}, "llama.cpp cannot turn chunked_prefill off"),
        ({"prefill_chunk_tokens": 512}, "llama.cpp has no switch for prefill_chunk_tokens"),
        ({"kv_cache_dtype": "fp8"}, "llama.cpp takes kv_cache_dtype as one of f32, f16"),
    ],
)
async def test_a_start_option_the_engine_has_no_switch_for_is_refused_over_http(
    native_agent: tuple[str, AgentClient, AgentConfig], option: dict[str, Any], words: str
) -> None:
    _, client, config = native_agent
    for runtime in ("process", "compose"):
        message = await refused(
            client, 400, "llamacpp", {"model": "tiny.gguf", **option}, runtime=runtime
        )
        assert words in message and "nothing was started" in message
    entries = [e for e in AuditLog(config.audit_log).entries() if e["action"] == "start"]
    assert [e["outcome"] for e in entries] == ["failed", "failed"]


def test_allowed_extra_args_reach_the_command_line_split_and_checked() -> None:
    spec = get_spec("llamacpp")
    cfg = LaunchConfig(model="/m.gguf", extra_args=("--threads=2", "-ub", "64", "--no-warmup"))
    args = spec.command_args(cfg)
    assert args[-5:] == ["--threads", "2", "-ub", "64", "--no-warmup"]
    assert args.count("--host") == 1 and args.count("--port") == 1
    # The compose runtime renders through the same allow-list.
    bad = replace(cfg, extra_args=("--host", "0.0.0.0"))
    with pytest.raises(UnsupportedOption, match="'--host' is refused"):
        spec.compose_env(bad, deployment_id="d1", node="n", platform="nvidia")
    with pytest.raises(UnsupportedOption, match="takes no extra_args"):
        spec.compose_env(cfg, deployment_id="d1", node="n", platform="cpu")


FULL = LaunchConfig(
    model="m", context_len=512, gpu_mem_fraction=0.5, quantization="q", max_num_seqs=2,
    api_key="k", tensor_parallel=2, pipeline_parallel=2,
)  # fmt: skip
NEVER = {
    "--host", "--hostname", "--server-name", "--port", "--server-port", "-m", "--model",
    "--model-path", "--model-id", "--log-file", "--api-key", "--api-key-file", "--ssl-keyfile",
    "--ssl-certfile", "--download-dir", "--trust-remote-code", "--chat-template", "--tokenizer",
    "--lora", "--mmproj", "--path", "--slot-save-path", "-hf", "--load-format",
}  # fmt: skip


@pytest.mark.parametrize("spec", all_specs(), ids=lambda s: s.kind)
def test_no_engine_allows_a_flag_that_binds_loads_or_repeats_a_rendered_one(spec: Any) -> None:
    allowed = {name for flag in spec.extra_flags for name in flag.names}
    assert not allowed & NEVER
    rendered: set[str] = set()
    for cfg in (FULL, replace(FULL, pipeline_parallel=1), LaunchConfig(model="m")):
        try:
            rendered |= set(spec.command_args(cfg))
        except UnsupportedOption:
            continue
    assert rendered and not allowed & rendered  # a LaunchConfig field sets those


@pytest.mark.parametrize(
    "model",
    ["../../../../etc/hostname", "~/.ssh/id_rsa", "/etc/shadow", "link-out.gguf", "/"],
)
async def test_native_model_paths_resolve_inside_the_model_dirs(
    native_agent: tuple[str, AgentClient, AgentConfig], model: str
) -> None:
    _, client, config = native_agent
    (config.model_dirs[0] / "link-out.gguf").symlink_to("/etc/hostname")
    message = await refused(client, 403, "llamacpp", {"model": model}, runtime="process")
    assert f"model {model!r} is outside the model directories" in message


async def test_a_relative_native_model_is_given_to_the_engine_inside_the_model_dir(
    native_agent: tuple[str, AgentClient, AgentConfig],
) -> None:
    _, client, config = native_agent
    with pytest.raises(AgentError) as info:  # the stand-in binary exits: 502, as it should
        await client.start("llamacpp", {"model": "tiny.gguf"}, runtime="process")
    assert info.value.status == 502
    (engine,) = await client.engines()
    assert engine.config["model"] == str((config.model_dirs[0] / "tiny.gguf").resolve())
    await client.stop(engine.id)


async def post(url: str, path: str, body: Any) -> tuple[int, str]:
    async with (
        aiohttp.ClientSession() as http,
        http.post(url + path, json=body, headers=AUTH) as resp,
    ):
        return resp.status, (await resp.json())["error"]


@pytest.mark.parametrize(
    ("body", "words"),
    [
        (
            {"options": {"devices": ["/dev/sda"]}},
            "unknown option(s) devices: nothing was started (known options: model_dir,",
        ),
        ({"options": {"security_opt": ["seccomp=unconfined"]}}, "unknown option(s) security_opt"),
        ({"privileged": True}, "unknown field(s) privileged: nothing was done (known fields: kind"),
        ({"gpus": ["0\n1"]}, "gpus must be a list of GPU indices (non-negative integers)"),
        ({"gpus": "0"}, "gpus must be a list, not str"),
        ({"wait": "no"}, "wait must be true or false, not str"),
        ({"options": ["model_dir"]}, "options must be an object, not list"),
    ],
)
async def test_unknown_or_ill_typed_start_fields_are_refused(
    native_agent: tuple[str, AgentClient, AgentConfig], body: dict[str, Any], words: str
) -> None:
    url, client, _ = native_agent
    request = {"kind": "sim", "config": {"profile": "h100-llama2-7b-vllm"}, **body}
    status, message = await post(url, "/v1/engines", request)
    assert (status, words in message) == (400, True), message
    assert await client.engines() == []


@pytest.mark.parametrize(
    ("config", "words"),
    [
        ({"gpu_ids": ["0\n…"]}, "gpu_ids must be a list of GPU indices (integers)"),
        ({"gpu_ids": "01"}, "gpu_ids must be a list of GPU indices (integers)"),
        ({"port": "8080"}, "port must be an integer, not str"),
        ({"context_len": True}, "context_len must be an integer, not bool"),
        ({"extra_args": "--threads 2"}, "extra_args must be a list of strings"),
        ({"model": "/models/$(id).gguf"}, "MODEL would contain ['$']"),
        ({"model": "/models/`id`.gguf"}, "MODEL would contain ['`']"),
    ],
)
async def test_bad_launch_values_are_refused_before_a_record_exists(
    native_agent: tuple[str, AgentClient, AgentConfig], config: dict[str, Any], words: str
) -> None:
    _, client, _ = native_agent
    launch = {"model": "/models/tiny.gguf", **config}
    message = await refused(client, 400, "llamacpp", launch, runtime="compose")
    assert words in message
    assert "not supported between" not in message  # not a Python error


async def test_swap_refuses_unknown_fields_and_extra_args_before_stopping(
    native_agent: tuple[str, AgentClient, AgentConfig],
) -> None:
    url, client, _ = native_agent
    engine = await client.start("sim", {"profile": "h100-llama2-7b-vllm"})
    swap = f"/v1/engines/{engine.id}/swap"
    status, message = await post(url, swap, {"config": {}, "privileged": True})
    assert status == 400 and "unknown field(s) privileged" in message
    status, message = await post(url, swap, {"config": {}, "options": {"devices": []}})
    assert status == 400 and "unknown option(s) devices" in message
    (still,) = await client.engines()
    assert (still.id, still.health) == (engine.id, "healthy")
    assert [e.kind for e in await client.recent_events()] == ["starting", "started", "healthy"]
    await client.stop(engine.id)


async def raw_request(url: str, head: bytes) -> bytes:
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(head)
        await writer.drain()
        return await asyncio.wait_for(reader.read(4096), timeout=10)
    finally:
        writer.close()
        await writer.wait_closed()


@pytest.mark.parametrize("route", [b"GET /v1/node", b"POST /v1/engines", b"GET /metrics"])
async def test_a_token_that_is_not_utf8_is_a_wrong_token(
    native_agent: tuple[str, AgentClient, AgentConfig], route: bytes
) -> None:
    url, client, _ = native_agent
    head = (
        route
        + b" HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \xff\xfe"
        + (TOKEN.encode() + b"\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
    )
    answer = await raw_request(url, head)
    assert answer.startswith(b"HTTP/1.1 401"), answer[:200]
    assert b"missing or wrong bearer token" in answer
    assert await client.engines() == []
