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
from loadgen.datasets import DatasetEntry, DatasetReader, WorkloadError, scan
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


def read_all(path: Path, entries: int) -> list[DatasetEntry]:
    """Every entry of a scanned file, in order, as a run reads them."""
    reader = DatasetReader(path, "skip", entries)
    try:
        return [reader.entry(i) for i in range(entries)]
    finally:
        reader.close()


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
            read = read_all(path, found.entries)
        for entry, (number, want) in zip(read, good, strict=True):
            assert want is not None
            assert (entry.line, entry.prompt) == (number, want["prompt"])
            assert (entry.output_len, entry.input_len) == (
                want.get("output_len"),
                want.get("input_len"),
            )


# --- ShareGPT JSON lists ---------------------------------------------------------------

JSON_SCALAR = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False, allow_infinity=False),
    TEXT,
)
EXTRA = st.dictionaries(
    st.sampled_from(["id", "score", "ok", "tags", "meta"]),
    st.one_of(JSON_SCALAR, st.lists(JSON_SCALAR, max_size=3)),
    max_size=3,
)
"""Fields beside "conversations" a real export carries (ids, scores, flags): numbers,
literals and escapes that a read can cut anywhere."""


def turn(speaker: str, text: str) -> dict[str, str]:
    return {"from": speaker, "value": text}


@st.composite
def conversation(draw: st.DrawFn) -> tuple[str, Any, str | None]:
    """(kind, the item, the prompt an entry has): a conversation that is sent, one that
    is not (no answer, or a blank first turn), or an item that is not a conversation."""
    kind = draw(st.sampled_from(["good", "good", "unused", "bad"]))
    extra = draw(EXTRA)
    if kind == "good":
        prompt = draw(PROMPT)
        turns = [turn("human", prompt), turn("gpt", draw(TEXT))]
        return kind, {**extra, "conversations": turns}, prompt
    if kind == "unused":
        turns = draw(
            st.sampled_from(
                [[turn("human", "only a question")], [turn("human", " "), turn("gpt", "a")]]
            )
        )
        return kind, {**extra, "conversations": turns}, None
    item = draw(
        st.one_of(
            JSON_SCALAR,
            st.lists(JSON_SCALAR, max_size=2),
            EXTRA.map(lambda e: {**e, "conversations": 5}),
        )
    )
    return kind, item, None


@settings(max_examples=150, deadline=PROPERTY_DEADLINE_MS)
@given(
    items=st.lists(conversation(), min_size=1, max_size=12).filter(
        lambda items: any(kind == "good" for kind, _, _ in items)
    ),
    indent=st.sampled_from([None, 1, 2]),
    ascii_only=st.booleans(),
    read_bytes=st.integers(min_value=1, max_value=200),
)
def test_every_conversation_is_read_and_every_bad_item_named(
    items: list[tuple[str, Any, str | None]], indent: int | None, ascii_only: bool, read_bytes: int
) -> None:
    """A list as exports write it (one line or indented, escaped or UTF-8), read in
    reads of any size: each conversation is an entry with its first turn and the line its
    item starts on, each non-conversation is named by that line, and the rest counted."""
    texts = [json.dumps(item, indent=indent, ensure_ascii=ascii_only) for _, item, _ in items]
    between = ",\n" if indent else ", "
    body = "[\n" + between.join(texts) + "\n]\n"
    starts, line = [], 2
    for text in texts:
        starts.append(line if indent else 2)
        line += text.count("\n") + 1
    good = [
        (at, prompt) for at, (kind, _, prompt) in zip(starts, items, strict=True) if kind == "good"
    ]
    bad = [at for at, (kind, _, _) in zip(starts, items, strict=True) if kind == "bad"]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"sharegpt-{next(_names)}.json"
        path.write_text(body, encoding="utf-8")
        with mock.patch.object(datasets, "READ_BYTES", read_bytes):
            if bad:
                with pytest.raises(WorkloadError) as failed:
                    scan(path, "fail")
                assert f", line {bad[0]}: " in str(failed.value)
                assert "not a conversation object" in str(
                    failed.value
                ) or "not a list of turns" in str(failed.value)
            found = scan(path, "skip")
            assert (found.entries, found.bad_count, found.unused) == (
                len(good),
                len(bad),
                sum(kind == "unused" for kind, _, _ in items),
            )
            assert found.bad_lines == tuple(bad[: datasets.NAMED_BAD_LINES])
            read = read_all(path, found.entries)
    assert [(e.line, e.prompt) for e in read] == good


@settings(max_examples=100, deadline=PROPERTY_DEADLINE_MS)
@given(
    items=st.lists(conversation(), min_size=1, max_size=6),
    cut=st.floats(min_value=0.05, max_value=0.999),
    read_bytes=st.integers(min_value=1, max_value=200),
)
def test_a_cut_sharegpt_list_is_one_clear_error(
    items: list[tuple[str, Any, str | None]], cut: float, read_bytes: int
) -> None:
    """A list cut short (a copy that stopped) is never read as whole: skipping bad items,
    the scan ends with the error that says the list is not closed or where its JSON
    breaks (failing at the first bad item, that item's error may come first)."""
    body = json.dumps([item for _, item, _ in items], indent=1)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"cut-{next(_names)}.json"
        path.write_text(body[: max(1, int(len(body) * cut))], encoding="utf-8")
        with mock.patch.object(datasets, "READ_BYTES", read_bytes):
            with pytest.raises(WorkloadError) as failed:
                scan(path, "skip")
    message = str(failed.value)
    assert "is not closed with ']'" in message or "JSON syntax error" in message, message
