"""Datasets people use (issue 19, point 4): ShareGPT files and JSONL prompts, read
streaming, each malformed line reported by its number and skipped or fatal by
``--on-bad-line``; the stored run names the file by name and SHA-256 and keeps
requested vs engine-counted tokens as for sized prompts."""

from __future__ import annotations

import hashlib
import json
import re
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import aiohttp
import pytest

from loadgen import PromptSource, Workload, WorkloadError, datasets, read_jsonl
from sim import RunningSim
from store import open_store
from store.queries import measured_workload
from tests.loadgen.conftest import bench
from tests.loadgen.test_llama_server_live import _wait_health

SIM_TEMPLATE_TOKENS = 7
"""What the simulator's chat template adds to one user message (``sim.textgen``)."""


def sharegpt_text() -> str:
    """A pretty-printed ShareGPT list (one conversation over many lines, as the real
    files are) with a malformed entry on line 14 and an unanswered one."""
    good = [
        {"id": "a", "conversations": [
            {"from": "human", "value": "Why is the sky blue?"},
            {"from": "gpt", "value": "Rayleigh scattering."}]},
        "not a conversation",
        {"id": "c", "conversations": [{"from": "human", "value": "unanswered"}]},
        {"id": "d", "conversations": [
            {"from": "human", "value": "Name a prime, then tell me why it is one."},
            {"from": "gpt", "value": "7"}]},
    ]  # fmt: skip
    return json.dumps(good, indent=2)


def prompts_jsonl(count: Callable[[str], int] = lambda p: len(p.split())) -> str:
    """Prompt lines with lengths (``count`` gives the stated input length), and three
    malformed ones: lines 2, 5 and 6."""

    def row(prompt: str, output_len: int, **more: object) -> str:
        return json.dumps({"prompt": prompt, "output_len": output_len, **more})

    lines = [
        row("Count to three, please.", 5, input_len=count("Count to three, please.")),
        "{this is not json",
        row("Say hello to the world.", 7, input_len=count("Say hello to the world.")),
        "",  # blank lines are not entries
        json.dumps({"text": "no prompt key"}),
        row("What is two and two?", -3),
        json.dumps({"conversations": [{"from": "human", "value": "A conversation line."},
                                      {"from": "gpt", "value": "ok"}]}),
        json.dumps({"prompt": "Name the third planet.", "output_tokens": 6,
                    "prompt_tokens": count("Name the third planet.")}),
    ]  # fmt: skip
    return "\n".join(lines) + "\n"


def test_sharegpt_list_bad_entry_is_named_by_its_line(tmp_path: Path) -> None:
    path = tmp_path / "sharegpt.json"
    text = sharegpt_text()
    path.write_text(text)
    bad_line = 1 + text.splitlines().index('  "not a conversation",')
    with pytest.raises(WorkloadError, match=rf"sharegpt\.json, line {bad_line}: a str"):
        PromptSource(Workload(dataset=str(path)))
    source = PromptSource(Workload(dataset=str(path), on_bad_line="skip", output_len=9))
    assert source.dataset is not None
    assert (source.dataset.entries, source.dataset.unused) == (2, 1)
    assert source.dataset.bad_lines == (bad_line,)
    assert source.dataset.sha256 == hashlib.sha256(text.encode()).hexdigest()
    warning = source.dataset.warning()
    assert warning is not None and f"({bad_line})" in warning
    items = [source.item(n) for n in range(5)]
    assert [i.prompt for i in items[:2]] == [
        "Why is the sky blue?",
        "Name a prime, then tell me why it is one.",
    ]
    assert items[2].prompt == items[0].prompt  # cycles
    assert all(i.output_len == 9 and i.engine_input_len is None for i in items)


def test_jsonl_prompts_with_lengths_and_every_bad_line_reported(tmp_path: Path) -> None:
    path = tmp_path / "prompts.jsonl"
    path.write_text(prompts_jsonl())
    with pytest.raises(WorkloadError, match=r"prompts\.jsonl, line 2: not JSON.*--on-bad-line"):
        PromptSource(Workload(dataset=str(path)))
    source = PromptSource(Workload(dataset=str(path), on_bad_line="skip", output_len=50))
    found = source.dataset
    assert found is not None and found.format == "jsonl"
    assert (found.entries, found.sized_entries, found.bad_lines) == (4, 3, (2, 5, 6))
    assert found.first_error is not None and "line 2" in found.first_error
    items = [source.item(n) for n in range(4)]
    assert [(i.output_len, i.engine_input_len) for i in items] == [
        (5, 4), (7, 5), (50, None), (6, 4),
    ]  # fmt: skip
    assert items[2].prompt == "A conversation line."


def test_a_syntax_error_in_a_sharegpt_list_ends_it_with_its_line(tmp_path: Path) -> None:
    path = tmp_path / "broken.json"
    text = sharegpt_text().replace('"Rayleigh scattering."', '"Rayleigh" scattering."')
    path.write_text(text)
    line = 1 + next(i for i, s in enumerate(text.splitlines()) if "Rayleigh" in s)
    with pytest.raises(WorkloadError, match=rf"line {line}: JSON syntax error"):
        PromptSource(Workload(dataset=str(path), on_bad_line="skip"))


@pytest.mark.parametrize("read_bytes", [5, 64, 1 << 16])
def test_chunk_boundaries_do_not_change_what_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, read_bytes: int
) -> None:
    """A multi-byte character or an entry cut by a read is read whole all the same."""
    monkeypatch.setattr(datasets, "READ_BYTES", read_bytes)
    path = tmp_path / "utf8.json"
    text = sharegpt_text().replace("sky", "ciel bleu — ☀")
    path.write_text(text, encoding="utf-8")
    found = datasets.scan(path, "skip")
    reader = datasets.DatasetReader(path, "skip", found.entries)
    d_line = text.splitlines().index('    "id": "d",')  # its "{" is the line above
    try:
        first = reader.entry(0)
        assert (first.prompt, first.line) == ("Why is the ciel bleu — ☀ blue?", 2)
        assert reader.entry(3).line == d_line  # cycling: the second entry again
    finally:
        reader.close()


def test_a_large_dataset_is_read_streaming(tmp_path: Path) -> None:
    """A 16 MiB JSONL is scanned and read from with a fraction of it allocated at once
    (the last ``RECENT_ENTRIES`` prompts, 2 KB each here): it is never loaded whole."""
    path = tmp_path / "big.jsonl"
    line = json.dumps({"prompt": "word " * 400, "output_len": 8}) + "\n"
    with path.open("w") as f:
        for _ in range(16 * 2**20 // len(line)):
            f.write(line)
    tracemalloc.start()
    try:
        source = PromptSource(Workload(dataset=str(path)))
        for n in range(2000):
            source.item(n)
        source.close()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert source.dataset is not None and source.dataset.entries > 8000
    assert peak < 4 * 2**20, f"{peak / 2**20:.1f} MiB allocated at once"


def _sim_tokens(text: str) -> int:
    return len(re.findall(r"\w+|[^\w\s]", text))


async def test_a_jsonl_run_against_the_simulator_is_stored_with_its_dataset(
    vllm_sim: RunningSim, tmp_path: Path
) -> None:
    """Skipped lines are named in the summary and the stored run; each request asks
    the dataset's output length and records the dataset's input length beside the
    engine's count (the simulator adds its template's tokens to every prompt)."""
    path = tmp_path / "prompts.jsonl"
    # stated in the simulator's own tokens (words and punctuation); line 2 a JSON list
    text = prompts_jsonl(_sim_tokens).replace("{this is not json", "[1, 2]")
    path.write_text(text)
    db, jsonl = tmp_path / "runs.db", tmp_path / "r.jsonl"
    argv = ("--url", vllm_sim.url, "--requests", "8", "--dataset", str(path),
            "--save", "--db", str(db), "--jsonl", str(jsonl))  # fmt: skip
    code, _, err = await bench(*argv)
    assert code == 2 and "prompts.jsonl, line 2: a list" in " ".join(err.split())  # no run
    with open_store(db) as st:
        assert st.list_runs() == []
    code, out, err = await bench(*argv, "--on-bad-line", "skip")
    assert code == 0, err
    said = " ".join((out + err).split())
    assert "skipped 3 malformed line(s) (2, 5, 6)" in said
    with open_store(db) as st:
        (run,) = st.list_runs()
        summary = st.levels(run.run_id)[0].summary
    assert run.workload["dataset_id"] == {
        "name": "prompts.jsonl",
        "sha256": hashlib.sha256(text.encode()).hexdigest(),
    }
    assert run.workload["dataset_read"]["bad_lines"] == [2, 5, 6]
    records, _ = read_jsonl(jsonl)
    assert len(records) == 8 and all(r.ok for r in records)
    by_output = {r.requested_output_tokens: r for r in records}
    assert set(by_output) == {5, 7, 6, 128}  # the lines' lengths; the workload's default
    stated = {5: "Count to three, please.", 7: "Say hello to the world.",
              6: "Name the third planet."}  # fmt: skip
    for r in records:
        assert r.output_tokens == r.requested_output_tokens  # the simulator honours it
        if r.requested_output_tokens in stated:  # stated: the engine's count beside it
            # the simulator tokenizes, so the chat template's tokens were measured and
            # are part of what was asked
            want = _sim_tokens(stated[r.requested_output_tokens]) + SIM_TEMPLATE_TOKENS
            assert r.requested_prompt_tokens == want == r.prompt_tokens, r
    assert summary.input_requested.mean is not None and summary.input_sent.mean is not None
    assert summary.output_requested.mean == summary.output_sent.mean


async def test_datasets_against_the_rigs_llama_server(llama_server: str, tmp_path: Path) -> None:
    """The real llama-server: a JSONL whose input lengths were counted by its own
    /tokenize is sent exactly so, the chat template measured and added to what it
    should count; a ShareGPT file runs with no input length asked."""
    await _wait_health(llama_server)
    prompts = ["Count to three, please.", "Say hello to the world.", "Name the third planet."]
    async with aiohttp.ClientSession() as session:
        counts = []
        for prompt in prompts:
            async with session.post(llama_server + "/tokenize", json={"content": prompt}) as r:
                counts.append(len((await r.json())["tokens"]))
    path = tmp_path / "prompts.jsonl"
    rows = [
        json.dumps({"prompt": p, "input_len": n, "output_len": 3})
        for p, n in zip(prompts, counts, strict=True)
    ]
    path.write_text("\n".join([rows[0], "[not, json", *rows[1:]]) + "\n")
    jsonl = tmp_path / "r.jsonl"
    code, out, err = await bench(
        "--url", llama_server, "--requests", "6", "--dataset", str(path),
        "--on-bad-line", "skip", "--jsonl", str(jsonl),
    )  # fmt: skip
    assert code == 0, err
    said = " ".join((out + err).split())
    assert "line(s) (2)" in said and "tokens of chat template on stated input lengths" in said
    records, _ = read_jsonl(jsonl)
    assert len(records) == 6
    for r in records:
        assert r.requested_output_tokens == 3
        assert r.requested_prompt_tokens is not None and r.prompt_tokens is not None
        # the template's tokens included: as exact as sized prompts (a prompt's last
        # token may merge with the template's text in this small vocabulary)
        assert abs(r.prompt_tokens - r.requested_prompt_tokens) <= 2
    share = tmp_path / "sharegpt.json"
    share.write_text(sharegpt_text())
    code, out, err = await bench(
        "--url", llama_server, "--requests", "2", "--dataset", str(share),
        "--on-bad-line", "skip", "--output-len", "3",
    )  # fmt: skip
    assert code == 0, err
    assert "dataset prompts, as sharegpt.json has them" in " ".join(out.split())


def test_compare_tells_datasets_apart_by_content_not_path() -> None:
    """The same file under two paths is one workload; an edited file is another."""
    base = {"input_len": 512, "output_len": 128, "dataset": "/a/prompts.jsonl"}
    one = {**base, "dataset_id": {"name": "prompts.jsonl", "sha256": "0" * 64}}
    moved = {**one, "dataset": "/b/prompts.jsonl", "dataset_read": {"bad_count": 0}}
    edited = {**one, "dataset_id": {"name": "prompts.jsonl", "sha256": "1" * 64}}
    assert measured_workload(one) == measured_workload(moved)
    assert measured_workload(one) != measured_workload(edited)
