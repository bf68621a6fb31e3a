"""``infer-agent`` as a real process: token from a file, TLS, loopback by default."""

from __future__ import annotations

import asyncio
import ssl
import subprocess
import sys
from pathlib import Path

import aiohttp
import pytest

from agents.cli import build_parser, config_from_args, main
from agents.client import AgentClient, AgentError
from tests.ports import free_port
from tests.waiting import apoll_until

TOKEN = "cli-token-0123456789abcdef"


def test_help_explains_security_and_examples(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    for words in (
        "--token-file",
        "--allow-image",
        "--model-dir",
        "--replay-trace",
        "/healthz",
        "127.0.0.1",
    ):
        assert words in out


def test_defaults_bind_loopback_and_missing_token_is_explained(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("INFER_AGENT_TOKEN", raising=False)
    assert main(["--replay-trace"]) == 2
    assert "no token" in capsys.readouterr().err
    token_file = tmp_path / "tok"
    token_file.write_text(TOKEN + "\n")
    token_file.chmod(0o600)
    config = config_from_args(
        build_parser().parse_args(
            ["--token-file", str(token_file), "--interval", "500ms", "--replay-trace"]
        )
    )
    assert (config.host, config.port, config.interval_s) == ("127.0.0.1", 7070, 0.5)
    assert config.token == TOKEN and config.platform == "replay"
    token_file.write_text("short\n")
    assert main(["--token-file", str(token_file)]) == 2
    assert "at least 16" in capsys.readouterr().err


@pytest.fixture
def tls_pair(tmp_path: Path) -> tuple[Path, Path]:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    return cert, key


async def test_agent_process_serves_tls_with_the_token(
    tmp_path: Path, tls_pair: tuple[Path, Path]
) -> None:
    cert, key = tls_pair
    token_file = tmp_path / "tok"
    token_file.write_text(TOKEN)
    token_file.chmod(0o600)
    port = free_port()
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "agents.cli",
        "--listen",
        f"127.0.0.1:{port}",
        "--token-file",
        str(token_file),
        "--tls-cert",
        str(cert),
        "--tls-key",
        str(key),
        "--replay-trace",
        "--state-dir",
        str(tmp_path / "state"),
        "--node-name",
        "clinode",
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    ctx = ssl.create_default_context(cafile=str(cert))
    url = f"https://127.0.0.1:{port}"
    try:
        async with aiohttp.ClientSession() as http:

            async def healthy() -> bool:
                async with http.get(url + "/healthz", ssl=ctx) as resp:
                    return resp.status == 200

            await apoll_until(
                healthy, "the agent to listen", ignoring=(aiohttp.ClientConnectorError,)
            )
            async with AgentClient(url, TOKEN, http, ssl_context=ctx) as client:
                frame = await client.snapshot()
                assert frame.node == "clinode" and frame.gpus[0].name == "NVIDIA H200"
            async with AgentClient(url, "x" * 20, http, ssl_context=ctx) as wrong:
                with pytest.raises(AgentError) as info:
                    await wrong.node_info()
                assert info.value.status == 401
            # Plain HTTP to a TLS port gets nowhere.
            with pytest.raises(aiohttp.ClientError):
                async with http.get(f"http://127.0.0.1:{port}/healthz") as resp:
                    await resp.read()
    finally:
        proc.terminate()
        await proc.wait()
