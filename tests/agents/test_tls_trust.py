"""Trusting an agent's TLS certificate the way the node's config says: the fingerprint
``infer-agent`` prints at start-up pinned, a CA file, and the refusals (a pin that does not
match names both fingerprints; an unknown CA says how to trust it)."""

from __future__ import annotations

import asyncio
import hashlib
import re
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from agents.client import AgentError
from control.config import parse_config
from control.transport import connected
from tests.ports import free_port

TOKEN = "tls-token-0123456789abcdef"


def openssl(*argv: str) -> str:
    return subprocess.run(
        ["openssl", *argv], check=True, capture_output=True, text=True, timeout=60
    ).stdout


def certificates(tmp_path: Path) -> dict[str, Path]:
    """A CA, and the agent's key and certificate (for 127.0.0.1) signed by it."""
    paths = {k: tmp_path / f"{k}.pem" for k in ("ca", "ca_key", "cert", "key", "csr")}
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    openssl("req", "-x509", *ec, "-days", "1", "-subj", "/CN=lab CA",
            "-keyout", str(paths["ca_key"]), "-out", str(paths["ca"]))  # fmt: skip
    openssl("req", *ec, "-subj", "/CN=127.0.0.1",
            "-keyout", str(paths["key"]), "-out", str(paths["csr"]))  # fmt: skip
    (tmp_path / "san.ext").write_text("subjectAltName=IP:127.0.0.1\n")
    openssl("x509", "-req", "-in", str(paths["csr"]), "-CA", str(paths["ca"]),
            "-CAkey", str(paths["ca_key"]), "-CAcreateserial", "-days", "1",
            "-extfile", str(tmp_path / "san.ext"), "-out", str(paths["cert"]))  # fmt: skip
    return paths


@pytest_asyncio.fixture
async def tls_agent(tmp_path: Path) -> AsyncIterator[tuple[str, str, dict[str, Path]]]:
    """A real ``infer-agent`` serving TLS with the CA-signed certificate: its URL, the
    fingerprint it printed at start-up, the certificate files."""
    paths = await asyncio.to_thread(certificates, tmp_path)
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    token_file.chmod(0o600)
    port = free_port()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "agents.cli", "--listen", f"127.0.0.1:{port}",
        "--token-file", str(token_file), "--tls-cert", str(paths["cert"]),
        "--tls-key", str(paths["key"]), "--replay-trace", "--node-name", "tlsnode",
        "--state-dir", str(tmp_path / "state"),
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        assert proc.stderr is not None
        line = (await asyncio.wait_for(proc.stderr.readline(), 30)).decode()
        printed = re.search(r"TLS certificate (sha256:[0-9a-f]{64})", line)
        assert printed, line
        yield f"https://127.0.0.1:{port}", printed.group(1), paths
    finally:
        proc.terminate()
        await proc.wait()


def config_for(url: str, token_file: Path, trust: str) -> str:
    return f'[[nodes]]\nname = "tls"\nurl = "{url}"\ntoken_file = "{token_file}"\n{trust}\n'


async def node_name(url: str, paths: dict[str, Path], trust: str) -> str:
    (node,) = parse_config(config_for(url, paths["ca"].parent / "token", trust)).nodes
    for _ in range(100):  # the agent printed its fingerprint before it listens: bounded wait
        try:
            async with connected(node) as client:
                return (await client.node_info()).node
        except AgentError as exc:
            if "Connect call failed" not in exc.message:
                raise
            await asyncio.sleep(0.1)
    raise TimeoutError("the agent did not listen")


async def test_the_printed_fingerprint_pinned_is_trusted_and_a_wrong_one_refused(
    tls_agent: tuple[str, str, dict[str, Path]],
) -> None:
    url, printed, paths = tls_agent
    der_argv = ["openssl", "x509", "-in", str(paths["cert"]), "-outform", "DER"]
    der = (
        await asyncio.to_thread(subprocess.run, der_argv, check=True, capture_output=True)
    ).stdout
    assert printed == "sha256:" + hashlib.sha256(der).hexdigest()
    # openssl's own spelling (upper case, colons) is accepted too
    colons = ":".join(f"{b:02X}" for b in hashlib.sha256(der).digest())
    assert await node_name(url, paths, f'fingerprint = "sha256:{colons}"') == "tlsnode"
    assert await node_name(url, paths, f'fingerprint = "{printed}"') == "tlsnode"

    wrong = "sha256:" + "ab" * 32
    with pytest.raises(AgentError) as refused:
        await node_name(url, paths, f'fingerprint = "{wrong}"')
    assert printed in refused.value.message and wrong in refused.value.message
    assert "refused" in refused.value.message


async def test_a_ca_file_is_trusted_and_an_unknown_ca_refused_with_the_way_to_trust_it(
    tls_agent: tuple[str, str, dict[str, Path]],
) -> None:
    url, _printed, paths = tls_agent
    assert await node_name(url, paths, f'ca = "{paths["ca"]}"') == "tlsnode"
    with pytest.raises(AgentError) as refused:
        await node_name(url, paths, "")
    message = refused.value.message
    assert "not trusted" in message and "ca = " in message and "fingerprint = " in message
