"""Hypothesis over JSONL workload files (issue 22, point 2): any mix of good prompt lines,
blank lines and malformed ones (not JSON, not an object, no prompt, a bad length), cut
into reads of any size. The outcome is exact: with ``--on-bad-line skip`` every good
line is an entry with its text and lengths, in order, and the bad lines are named by
number; with ``fail`` the error names the first bad line; nothing else, no hang."""

from __future__ import annotations

import itertools
import json
import tempfile
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadgen import datasets
from loadgen.datasets import DatasetReader, WorkloadError, scan
from tests.waiting import PROPERTY_DEADLINE_MS

TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)
PROMPT = TEXT.filter(lambda t: bool(t.strip()))
LENGTH = st.integers(min_value=1, max_value=100_000)


@st.composite
def good_line(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
    entry: dict[str, Any] = {"prompt": draw(PROMPT)}
    if draw(st.booleans()):
        entry["output_len"] = draw(LENGTH)
    if draw(st.booleans()):
        entry["input_len"] = draw(LENGTH)
    return json.dumps(entry), entry


BAD_LINE = st.one_of(
    # a control character outside or inside a string is never JSON
    TEXT.filter(lambda t: "\n" not in t).map(lambda t: "{" + t + "\x00"),
    st.one_of(st.lists(st.integers(), max_size=3), st.integers(), TEXT).map(json.dumps),
    TEXT.map(lambda t: json.dumps({"text": t})),  # no "prompt"
    st.sampled_from([0, -3, "5", 1.5, True, None]).map(
        lambda n: json.dumps({"prompt": "hi", "output_len": n})
    ),
)

LINE = st.one_of(
    good_line().map(lambda g: ("good", g[0], g[1])),
    BAD_LINE.map(lambda b: ("bad", b, None)),
    st.sampled_from(["", "   "]).map(lambda b: ("blank", b, None)),
)

_names = itertools.count()


@settings(max_examples=150, deadline=PROPERTY_DEADLINE_MS)
@given(
    lines=st.lists(LINE, max_size=30).filter(lambda ls: ls[:1] and ls[0][0] == "good"),
    read_bytes=st.integers(min_value=1, max_value=200),
)
def test_every_good_line_is_read_and_every_bad_one_named(
    lines: list[tuple[str, str, dict[str, Any] | None]], read_bytes: int
) -> None:
    # the first line is a good one: a file is told JSONL from ShareGPT by its first byte
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"prompts-{next(_names)}.jsonl"
        path.write_text("\n".join(text for _, text, _ in lines) + "\n", encoding="utf-8")
        good = [(n, entry) for n, (kind, _, entry) in enumerate(lines, 1) if kind == "good"]
        bad = [n for n, (kind, _, _) in enumerate(lines, 1) if kind == "bad"]
        with mock.patch.object(datasets, "READ_BYTES", read_bytes):  # reads cut anywhere
            if bad:
                with pytest.raises(WorkloadError) as failed:
                    scan(path, "fail")
                assert f", line {bad[0]}: " in str(failed.value)
            found = scan(path, "skip")
            assert (found.entries, found.bad_count) == (len(good), len(bad))
            assert found.bad_lines == tuple(bad[: datasets.NAMED_BAD_LINES])
            reader = DatasetReader(path, "skip", found.entries)
            try:
                read = [reader.entry(i) for i in range(found.entries)]
            finally:
                reader.close()
        for entry, (number, want) in zip(read, good, strict=True):
            assert want is not None
            assert (entry.line, entry.prompt) == (number, want["prompt"])
            assert (entry.output_len, entry.input_len) == (
                want.get("output_len"),
                want.get("input_len"),
            )
