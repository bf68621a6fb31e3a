"""Prompt datasets, read streaming: ShareGPT files and JSONL files of prompts.

Two shapes of file, told apart by their first character:

* ``[`` — a ShareGPT JSON file: a list of ``{"conversations": [{"from": "human",
  "value": ...}, {"from": "gpt", "value": ...}, ...]}``; the first turn is the prompt
  (a conversation without an answer is not used, and counted).  Read one conversation
  at a time, never the whole list at once.
* ``{`` — JSONL, one object a line: a ShareGPT conversation as above, or a prompt
  ``{"prompt": "...", "output_len": 128, "input_len": 97}`` with optional lengths
  (also spelled ``output_tokens`` / ``output_tokens_count``, ``prompt_tokens`` /
  ``prompt_tokens_count``): the output length is asked of the engine for that prompt,
  the input length is what the engine should count (the requested side of the run's
  requested-vs-sent tokens).

A line that is not what its shape says (not JSON, not an object, no text, a length
that is not a positive whole number) is reported with its line number: by
``on_bad_line`` the run fails at once ("fail", the default) or skips it, counted and
named in the run's warnings ("skip").  A syntax error inside a ShareGPT list ends the
file there: a list cannot be read past it (JSONL can).

``scan`` reads the file once before the run (its SHA-256, entries, bad lines);
``DatasetReader`` then hands out entries by number, reading ahead and cycling.
"""

from __future__ import annotations

import codecs
import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Literal


class WorkloadError(ValueError):
    """A workload that cannot be built (bad numbers, unreadable dataset)."""


BadLinePolicy = Literal["skip", "fail"]
BAD_LINE_POLICIES: tuple[BadLinePolicy, ...] = ("fail", "skip")
READ_BYTES = 1 << 16
_CUT_CHARS = 8
"""How far before a read's end a JSON value cut by it can fail to decode (5 seen: a cut
``\\uXXXX`` escape), with a margin: a syntax error there is looked at again with more text."""
NAMED_BAD_LINES = 20
"""Bad lines named in the run's warning and stored setup (the rest are counted)."""
RECENT_ENTRIES = 1024
"""Entries kept after they were handed out, for requests that ask slightly out of order."""
_OUTPUT_KEYS = ("output_len", "output_tokens", "output_tokens_count")
_INPUT_KEYS = ("input_len", "prompt_tokens", "prompt_tokens_count")


@dataclass(frozen=True, slots=True)
class DatasetEntry:
    prompt: str
    line: int
    output_len: int | None = None
    """Output tokens to ask for this prompt (None: the workload's ``output_len``)."""
    input_len: int | None = None
    """Prompt tokens the dataset says the prompt holds, where it says."""


@dataclass(frozen=True, slots=True)
class _Bad:
    line: int
    why: str
    fatal: bool = False
    """Nothing after it can be read (a syntax error inside a JSON list): fails the run
    whatever ``on_bad_line`` says."""


@dataclass(frozen=True, slots=True)
class _Unused:
    """A well-formed conversation with no prompt and answer to send."""


@dataclass(frozen=True, slots=True)
class DatasetScan:
    """What one pass over a dataset file found."""

    name: str
    sha256: str
    format: str
    """"sharegpt" (a JSON list) or "jsonl"."""
    entries: int
    sized_entries: int
    """Entries that say their prompt's tokens (``input_len``)."""
    unused: int
    """Conversations without a first turn and an answer (not sent)."""
    bad_lines: tuple[int, ...]
    """The first ``NAMED_BAD_LINES`` bad lines' numbers."""
    bad_count: int
    first_error: str | None
    on_bad_line: BadLinePolicy

    def identity(self) -> dict[str, str]:
        """What tells two runs' datasets apart (the stored run and Compare use it)."""
        return {"name": self.name, "sha256": self.sha256}

    def facts(self) -> dict[str, Any]:
        """How the file was read, for the stored run."""
        return {
            "format": self.format,
            "entries": self.entries,
            "entries_with_input_len": self.sized_entries,
            "unused": self.unused,
            "bad_lines": list(self.bad_lines),
            "bad_count": self.bad_count,
            "on_bad_line": self.on_bad_line,
        }

    def warning(self) -> str | None:
        if not self.bad_count:
            return None
        more = self.bad_count - len(self.bad_lines)
        lines = ", ".join(map(str, self.bad_lines)) + (f" and {more} more" if more else "")
        return (
            f"dataset {self.name}: skipped {self.bad_count} malformed line(s) ({lines}); "
            f"the first: {self.first_error}"
        )


def scan(path: str | Path, on_bad_line: BadLinePolicy) -> DatasetScan:
    """Read the whole file once, streaming: its SHA-256 and usable entries; WorkloadError
    (with the line number) at the first bad line when ``on_bad_line`` is "fail", or when
    nothing in it can be sent."""
    file_id = _file_id(path)
    known = _SCANS.get(file_id)
    if known is not None and known.on_bad_line == on_bad_line:
        return known
    digest = hashlib.sha256()
    entries = sized = unused = bad_count = 0
    bad_lines: list[int] = []
    first_error = None
    with _open(path) as file:
        fmt, items = _items(file, path, digest)
        for item in items:
            if isinstance(item, DatasetEntry):
                entries += 1
                sized += item.input_len is not None
            elif isinstance(item, _Unused):
                unused += 1
            else:
                if on_bad_line == "fail" or item.fatal:
                    raise WorkloadError(_bad_words(path, item, fail=not item.fatal))
                bad_count += 1
                first_error = first_error or _bad_words(path, item, fail=False)
                if len(bad_lines) < NAMED_BAD_LINES:
                    bad_lines.append(item.line)
    if not entries:
        raise WorkloadError(
            f"{path}: no prompt to send (a ShareGPT conversation needs a first turn and an "
            'answer; a JSONL prompt line needs "prompt")'
        )
    found = DatasetScan(
        Path(path).name, digest.hexdigest(), fmt, entries, sized, unused, tuple(bad_lines),
        bad_count, first_error, on_bad_line,
    )  # fmt: skip
    _SCANS.clear()  # one file's scan kept: a run's several prompt sources share it
    _SCANS[file_id] = found
    return found


_SCANS: dict[tuple[str, int, int, int], DatasetScan] = {}


def _file_id(path: str | Path) -> tuple[str, int, int, int]:
    """The file as it is now: a changed file is scanned again."""
    try:
        st = Path(path).stat()
    except OSError as exc:
        raise WorkloadError(f"cannot read dataset {path}: {exc.strerror or exc}") from exc
    return (str(Path(path).resolve()), st.st_ino, st.st_size, st.st_mtime_ns)


class DatasetReader:
    """Entries by number, read from the file as they are asked for: entry ``n`` of
    the file's usable ones (cycling), never the whole file in memory.  Numbers are
    asked in nearly increasing order (the runner's); an older one within the last
    ``RECENT_ENTRIES`` is served from memory, anything else by reading again."""

    def __init__(self, path: str | Path, on_bad_line: BadLinePolicy, entries: int) -> None:
        self.path, self.on_bad_line, self.entries = path, on_bad_line, entries
        self._file: IO[bytes] | None = None
        self._items: Iterator[DatasetEntry | _Bad | _Unused] | None = None
        self._next = 0  # the number of the entry the open file gives next
        self._recent: dict[int, DatasetEntry] = {}  # in the order they were read

    def entry(self, number: int) -> DatasetEntry:
        index = number % self.entries
        if (known := self._recent.get(index)) is not None:
            return known
        if self._items is None or index < self._next:
            self._reopen()
        while True:
            entry = self._read()
            self._recent[self._next] = entry
            if len(self._recent) > RECENT_ENTRIES:
                del self._recent[next(iter(self._recent))]
            self._next += 1
            if self._next - 1 == index:
                return entry

    def _reopen(self) -> None:
        self.close()
        self._file = _open(self.path)
        self._items = _items(self._file, self.path, None)[1]
        self._next = 0
        self._recent.clear()

    def _read(self) -> DatasetEntry:
        for cycle in (False, True):
            assert self._items is not None
            for item in self._items:
                if isinstance(item, DatasetEntry):
                    return item
                if isinstance(item, _Bad) and (self.on_bad_line == "fail" or item.fatal):
                    # the file changed since the scan that found it whole
                    raise WorkloadError(_bad_words(self.path, item, fail=True))
            if not cycle:
                self._reopen()  # the end: from the start again
        raise WorkloadError(f"{self.path}: no prompt left to send (the file changed)")

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
            self._items = None


def _open(path: str | Path) -> IO[bytes]:
    try:
        return Path(path).open("rb")
    except OSError as exc:
        raise WorkloadError(f"cannot read dataset {path}: {exc.strerror or exc}") from exc


def _bad_words(path: str | Path, bad: _Bad, *, fail: bool) -> str:
    hint = " (--on-bad-line skip leaves such lines out, each reported)" if fail else ""
    return f"{path}, line {bad.line}: {bad.why}{hint}"


def _items(
    file: IO[bytes], path: str | Path, digest: Any
) -> tuple[str, Iterator[DatasetEntry | _Bad | _Unused]]:
    """The file's format and its items in order; ``digest`` (a hashlib object) is fed
    every byte read."""
    head = file.read(READ_BYTES)
    if digest is not None:
        digest.update(head)
    first = head.lstrip()[:1]
    if first == b"[":
        return "sharegpt", _sharegpt_list(file, head, digest)
    if first == b"{":
        return "jsonl", _jsonl(file, head, digest)
    raise WorkloadError(
        f"{path}: neither a ShareGPT JSON list (starts with '[') nor JSONL of objects "
        "(each line starts with '{')"
    )


def _chunks(file: IO[bytes], head: bytes, digest: Any) -> Iterator[bytes]:
    yield head
    while block := file.read(READ_BYTES):
        if digest is not None:
            digest.update(block)
        yield block


def _jsonl(file: IO[bytes], head: bytes, digest: Any) -> Iterator[DatasetEntry | _Bad | _Unused]:
    partial = b""
    number = 0
    for block in _chunks(file, head, digest):
        lines = (partial + block).split(b"\n")
        partial = lines.pop()
        for raw in lines:
            number += 1
            if raw.strip():
                yield _jsonl_line(raw, number)
    if partial.strip():
        yield _jsonl_line(partial, number + 1)


def _jsonl_line(raw: bytes, line: int) -> DatasetEntry | _Bad | _Unused:
    try:
        obj = json.loads(raw)
    except ValueError as exc:
        return _Bad(line, f"not JSON ({exc})")
    if not isinstance(obj, dict):
        return _Bad(line, f"a {type(obj).__name__}, not an object")
    if "conversations" in obj:
        return _conversation(obj, line)
    prompt = obj.get("prompt")
    if not isinstance(prompt, str) or not prompt.strip():
        return _Bad(line, 'no "prompt" text (nor ShareGPT "conversations")')
    try:
        output_len, input_len = _length(obj, _OUTPUT_KEYS), _length(obj, _INPUT_KEYS)
    except ValueError as exc:
        return _Bad(line, str(exc))
    return DatasetEntry(prompt, line, output_len, input_len)


def _length(obj: dict[str, Any], keys: tuple[str, ...]) -> int | None:
    for key in keys:
        if key in obj:
            value = obj[key]
            if type(value) is not int or value < 1:
                raise ValueError(f"{key} = {value!r:.40} is not a whole number >= 1")
            return value
    return None


def _conversation(obj: Any, line: int) -> DatasetEntry | _Bad | _Unused:
    turns = obj.get("conversations") if isinstance(obj, dict) else None
    if not isinstance(turns, list) or not all(isinstance(t, dict) for t in turns):
        return _Bad(line, '"conversations" is not a list of turns')
    values = [t.get("value") for t in turns[:2]]
    texts = [v for v in values if isinstance(v, str)]
    if len(texts) < len(values):
        return _Bad(line, 'a turn\'s "value" is not text')
    if len(texts) < 2 or not texts[0].strip():
        return _Unused()
    return DatasetEntry(texts[0], line)


def _sharegpt_list(
    file: IO[bytes], head: bytes, digest: Any
) -> Iterator[DatasetEntry | _Bad | _Unused]:
    """The conversations of a JSON list, one decoded at a time from a sliding text
    buffer; each item's line is where it starts."""
    decoder = json.JSONDecoder()
    utf8 = codecs.getincrementaldecoder("utf-8")()
    blocks = _chunks(file, head, digest)
    text, pos, line = "", 0, 1
    at_end = False

    def more() -> bool:
        nonlocal text, pos, at_end
        block = next(blocks, None)
        at_end = block is None
        text = text[pos:] + utf8.decode(block or b"", final=at_end)
        pos = 0
        return not at_end

    def skip(chars: str) -> None:
        nonlocal pos, line
        while True:
            while pos < len(text) and text[pos] in chars:
                line += text[pos] == "\n"
                pos += 1
            if pos < len(text) or not more():
                return

    try:
        skip(" \t\r\n")
        pos += 1  # the list's "["
        while True:
            skip(" \t\r\n,")
            if pos >= len(text):
                yield _Bad(line, "the JSON list is not closed with ']'", fatal=True)
                return
            if text[pos] == "]":
                return
            start_line = line
            while True:
                try:
                    obj, end = decoder.raw_decode(text, pos)
                    if at_end or end < len(text) - _CUT_CHARS:
                        break
                    # it ends by the read's end: a number there ("12" of "12.5e3") may go
                    # on in the next block
                except json.JSONDecodeError as exc:
                    # An item cut by a read fails at most a few characters before the
                    # buffer's end (inside a literal, a number or a \uXXXX escape: 5 at
                    # most), or as an unterminated string: read on. An error further back,
                    # or with the whole file read, is the file's own.
                    near_end = exc.pos >= len(text) - _CUT_CHARS
                    if at_end or not (near_end or exc.msg.startswith("Unterminated")):
                        where = start_line + text.count("\n", pos, exc.pos)
                        why = f"JSON syntax error ({exc.msg}); a list cannot be read past it"
                        yield _Bad(where, why, fatal=True)
                        return
                more()
            line += text.count("\n", pos, end)
            pos = end
            yield (
                _conversation(obj, start_line)
                if isinstance(obj, dict)
                else _Bad(start_line, f"a {type(obj).__name__}, not a conversation object")
            )
    except UnicodeDecodeError as exc:
        yield _Bad(line, f"not UTF-8 text ({exc.reason})", fatal=True)
