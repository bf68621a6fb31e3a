"""The security sweep (issue 22, docs/reliability.md): the live routes (WebSocket upgrade,
event streams, the engine proxy, /metrics) refuse a missing or wrong token in constant time;
injection in any string that reaches a Compose file, its environment or a command line is
refused before anything runs and audited; the agent refuses a token file others may read and
never writes its token to its log. The route-table walk is
tests/agents/test_server.py::test_every_route_but_liveness_needs_the_token."""

from __future__ import annotations

import asyncio
import hmac
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from agents.cli import main
from agents.client import AgentClient
from agents.config import AgentConfig
from agents.embedded import embedded_agent
from agents.security import AuditLog
from tests.ports import free_port
from tests.waiting import apoll_until

from .conftest import TOKEN

ROOT = Path(__file__).parents[2]
SIM = {"profile": "h100-llama2-7b-vllm"}
WRONG = {
    "none": {},
    "same length, last byte differs": {"Authorization": f"Bearer {TOKEN[:-1]}X"},
    "the token's prefix": {"Authorization": f"Bearer {TOKEN[:8]}"},
    "the token with a suffix": {"Authorization": f"Bearer {TOKEN}0"},
    "another scheme": {"Authorization": f"Basic {TOKEN}"},
    "no scheme": {"Authorization": TOKEN},
}


async def test_live_streams_and_the_engine_proxy_refuse_a_missing_or_wrong_token(
    agent: tuple[str, AgentClient],
) -> None:
    """Every long-lived route, with a real engine behind the proxy: 401 before any frame,
    event or byte of the engine's answer; the right token opens each one."""
    url, client = agent
    engine = await client.start("sim", SIM)
    proxy = f"{url}/v1/engines/{engine.id}/proxy"
    chat = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    async with aiohttp.ClientSession() as http:
        for what, headers in WRONG.items():
            with pytest.raises(aiohttp.WSServerHandshakeError) as info:
                await http.ws_connect(f"{url}/v1/telemetry/stream", headers=headers)
            assert info.value.status == 401, what
            for method, target in (
                ("GET", f"{url}/v1/events/stream"),
                ("GET", f"{url}/metrics"),
                ("GET", f"{proxy}/v1/models"),
                ("POST", f"{proxy}/v1/chat/completions"),
            ):
                async with http.request(method, target, headers=headers, json=chat) as resp:
                    assert resp.status == 401, (what, method, target)
                    assert await resp.json() == {"error": "missing or wrong bearer token"}
        auth = {"Authorization": f"Bearer {TOKEN}"}
        async with http.ws_connect(f"{url}/v1/telemetry/stream", headers=auth) as ws:
            assert (await ws.receive(timeout=10)).type is aiohttp.WSMsgType.TEXT
        async with http.get(f"{proxy}/v1/models", headers=auth) as resp:
            assert resp.status == 200
    await client.stop(engine.id)


async def test_the_token_is_compared_in_constant_time(
    agent: tuple[str, AgentClient], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A wrong token that shares the right one's prefix takes the same path as any other:
    hmac.compare_digest over the bytes presented, never ``==``."""
    compared: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def spy(a: Any, b: Any) -> bool:
        compared.append((a, b))
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", spy)
    url, _ = agent
    async with aiohttp.ClientSession() as http:
        for presented in (TOKEN[:-1] + "X", TOKEN):
            async with http.get(
                f"{url}/v1/node", headers={"Authorization": f"Bearer {presented}"}
            ) as resp:
                assert resp.status == (200 if presented == TOKEN else 401)
    assert compared == [((TOKEN[:-1] + "X").encode(), TOKEN.encode()), (TOKEN.encode(),) * 2]


INJECTIONS = {
    "newline (YAML / env file)": "x\nprivileged: true",
    "carriage return": "x\rprivileged: true",
    "command substitution": "x$(touch /tmp/pwned)",
    "variable": "x${HOME}",
    "backtick": "x`id`",
    "double quote": 'x"y',
    "backslash": "x\\y",
    "NUL": "x\0y",
}


def _start_bodies(value: str, models: Path) -> dict[str, dict[str, Any]]:
    """Each string of a llama.cpp start that reaches Compose's environment (MODEL,
    MODEL_CACHE, ENGINE_IMAGE, the key) or the engine's command line (ENGINE_ARGS),
    carrying ``value``."""
    base: dict[str, Any] = {"model": "/models/tiny.gguf"}
    return {
        "model": {"config": {**base, "model": f"/models/{value}.gguf"}},
        "api_key": {"config": {**base, "api_key": f"key{value}"}},
        "kv_cache_dtype": {"config": {**base, "kv_cache_dtype": f"q8_0{value}"}},
        "quantization": {"config": {**base, "quantization": f"q4{value}"}},
        "image": {"config": {**base, "image": f"infer-top/llama-server:x{value}"}},
        "extra_args": {"config": {**base, "extra_args": ["--threads", f"2{value}"]}},
        "options.model_dir": {"config": base, "options": {"model_dir": f"{models}/{value}"}},
    }


@pytest.mark.parametrize("injection", list(INJECTIONS), ids=list(INJECTIONS))
async def test_injection_in_any_string_bound_for_compose_is_refused_and_audited(
    make_config: Callable[..., AgentConfig], tmp_path: Path, injection: str
) -> None:
    """Refused with words (400/403) before any deployment exists or Docker is asked, and
    each refusal is a line of the audit log with its reason."""
    models = tmp_path / "models"
    models.mkdir()
    config = make_config(model_dirs=(models,), allowed_engines=frozenset({"llamacpp"}))
    bodies = _start_bodies(INJECTIONS[injection], models)
    async with (
        embedded_agent(config) as (url, token),
        AgentClient(url, token) as client,
        aiohttp.ClientSession(headers={"Authorization": f"Bearer {token}"}) as http,
    ):
        answers = {}
        for field, body in bodies.items():
            request = {"kind": "llamacpp", "runtime": "compose", "wait": False, **body}
            async with http.post(f"{url}/v1/engines", json=request) as resp:
                answers[field] = (resp.status, (await resp.json()).get("error", ""))
        assert await client.engines() == []
        assert [e.kind for e in await client.recent_events()] == []  # nothing ran
    for field, (status, error) in answers.items():
        assert status in (400, 403) and error, (field, status, error)
    audited = [e for e in AuditLog(config.audit_log).entries() if e["action"] == "start"]
    assert [(e["status"], e["reason"]) for e in audited] == list(answers.values())
    assert all(e["outcome"] in ("refused", "failed") for e in audited)


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o660])
def test_the_agent_refuses_a_token_file_others_may_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], mode: int
) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    token_file.chmod(mode)
    assert main(["--token-file", str(token_file), "--replay-trace"]) == 2
    err = capsys.readouterr().err
    assert f"token file {token_file} is readable by others" in err
    assert f"chmod 600 {token_file}" in err
    assert TOKEN not in err


async def test_the_agent_never_logs_its_token(tmp_path: Path) -> None:
    """A real ``infer-agent -v`` (DEBUG) through a session of calls, right and wrong: start
    an engine, stream frames, proxy a completion, read events and metrics, stop. Its log,
    its audit log and every file of its state dir lack the token."""
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    token_file.chmod(0o600)
    log_path = tmp_path / "agent.log"
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with log_path.open("wb") as log:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "agents.cli", "-v", "--listen", f"127.0.0.1:{port}",
            "--token-file", str(token_file), "--replay-trace", "--interval", "200ms",
            "--state-dir", str(tmp_path / "state"), "--node-name", "sweep",
            cwd=ROOT, stdout=log, stderr=log,
        )  # fmt: skip
    try:
        async with aiohttp.ClientSession() as http:

            async def listening() -> bool:
                async with http.get(url + "/healthz") as resp:
                    return resp.status == 200

            await apoll_until(
                listening, "the agent to listen", ignoring=(aiohttp.ClientConnectorError,)
            )
            await _a_session_of_calls(url, http)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            await asyncio.wait_for(proc.wait(), 30)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
    text = log_path.read_text(errors="replace")
    assert "GET /v1/node" in text and "POST /v1/engines" in text  # the log really was kept
    assert TOKEN not in text
    for path in (tmp_path / "state").rglob("*"):
        if path.is_file():
            assert TOKEN.encode() not in path.read_bytes(), path


async def _a_session_of_calls(url: str, http: aiohttp.ClientSession) -> None:
    auth = {"Authorization": f"Bearer {TOKEN}"}
    for headers in WRONG.values():
        async with http.get(url + "/v1/node", headers=headers) as resp:
            assert resp.status == 401
    async with AgentClient(url, TOKEN, http) as client:
        await client.node_info()
        engine = await client.start("sim", SIM)
        stream = client.stream()
        try:
            for _ in range(3):
                await asyncio.wait_for(anext(stream), 10)
        finally:
            await stream.aclose()
        proxy = f"{url}/v1/engines/{engine.id}/proxy"
        async with http.get(f"{proxy}/v1/models", headers=auth) as resp:
            model = (await resp.json())["data"][0]["id"]
        chat = {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
        async with http.post(f"{proxy}/v1/chat/completions", json=chat, headers=auth) as resp:
            assert resp.status == 200
        await client.recent_events()
        assert "infer_" in await client.metrics_text()
        await client.stop(engine.id)
