"""Prompts sized by the model's tokenizer (issue 19, point 1), against the rig's real
llama-server, whose 1,024-token vocabulary makes every common word several tokens:
``--input-len 128`` sent 575 prompt tokens by the server's own count."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from loadgen import read_jsonl
from store import open_store
from tests.loadgen.conftest import bench
from tests.loadgen.test_llama_server_live import _wait_health

pytestmark = pytest.mark.docker  # the rig's llama-server binary and tiny model


async def test_input_len_128_sends_128_tokens_by_the_servers_count(
    llama_server: str, tmp_path: Path
) -> None:
    await _wait_health(llama_server)
    db, jsonl = tmp_path / "runs.db", tmp_path / "r.jsonl"
    code, out, err = await bench(
        "--url", llama_server, "--input-len", "128", "--output-len", "4", "--requests", "12",
        "--range-ratio", "0.5", "--save", "--db", str(db), "--jsonl", str(jsonl),
    )  # fmt: skip
    assert code == 0, err
    with open_store(db) as st:
        (run,) = st.list_runs()
    sizing = run.workload["sizing"]
    assert sizing.startswith("prompts sized by the engine's tokenizer (llamacpp /tokenize)")
    found = re.search(r"\+ (\d+) tokens of chat template", sizing)
    assert found, sizing
    template = int(found.group(1))  # reported apart from the prompt's own tokens
    assert 0 < template < 64
    records, _ = read_jsonl(jsonl)
    assert len(records) == 12
    for r in records:  # lengths 64..192 asked: each sent exactly, by the server's count
        assert r.prompt_tokens is not None and r.requested_prompt_tokens is not None
        asked = r.requested_prompt_tokens - template
        assert 64 <= asked <= 192
        assert abs(r.prompt_tokens - template - asked) <= 2, (r.prompt_tokens, asked)
    assert f"prompts: {sizing}" in " ".join(out.split())  # the template said apart
    assert "warning" not in out and "not sized" not in err
