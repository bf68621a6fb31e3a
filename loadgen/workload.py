"""What the load generator asks: synthetic, shared-prefix or dataset prompts.

Every run draws fresh prompts (a per-run salt) unless a seed is given: a run that
re-sent an earlier run's prompts would measure that run's prefix cache, not the engine.

Where the engine tokenizes for a client (``loadgen.sizing``), a synthetic prompt of
*L tokens* holds exactly L of its tokens.  Elsewhere it is L common short English
words, each a single token in the usual large BPE vocabularies (not in small ones: the
run then says its prompts were not sized).  The engine's ``usage.prompt_tokens`` in
every record says what it really counted.
"""

from __future__ import annotations

import random
import secrets
from dataclasses import dataclass
from typing import Protocol

from loadgen.datasets import (
    BAD_LINE_POLICIES,
    BadLinePolicy,
    DatasetReader,
    DatasetScan,
    scan,
)
from loadgen.datasets import WorkloadError as WorkloadError  # its home for the callers

# Words that are one token (with their leading space) in Llama, GPT and Qwen vocabularies.
WORDS = (
    "the of and to in is was for on that with as by at from his her are be this which "
    "or an had not but were they have one all their has been more who can there when "
    "new first also time after other into two only over its most some would about than "
    "city year state world many work part made where water used good long day house"
).split()


@dataclass(frozen=True, slots=True)
class Workload:
    input_len: int = 512
    output_len: int = 128
    range_ratio: float = 0.0
    """Lengths are drawn uniformly from [L(1−r), L(1+r)] (vLLM's meaning)."""
    shared_prefix_len: int = 0
    """Tokens of one prefix put before every prompt (prefix-cache workloads)."""
    dataset: str | None = None
    """A ShareGPT JSON file or a JSONL of prompts (``loadgen.datasets``), read streaming."""
    on_bad_line: BadLinePolicy = "fail"
    """A malformed dataset line fails the run ("fail") or is skipped and reported."""
    dataset_part: int = 0
    dataset_parts: int = 1
    """This run sends the dataset's entries ``part``, ``part + parts``, ... (one share
    of a run split over processes or nodes: the shares do not send the same prompts)."""
    seed: int | None = None
    """A number reproduces the prompts exactly (``--seed``); None draws fresh ones."""
    salt: str = ""
    """Drawn when there is no seed, so that no run is served from an earlier run's
    prefix cache; stored with the run (it says the prompts were fresh)."""

    def __post_init__(self) -> None:
        if self.seed is None and not self.salt:
            object.__setattr__(self, "salt", secrets.token_hex(8))
        if self.input_len < 1 or self.output_len < 1:
            raise WorkloadError("input_len and output_len must be at least 1")
        if not 0.0 <= self.range_ratio < 1.0:
            raise WorkloadError(f"range_ratio must be in [0, 1), got {self.range_ratio}")
        if self.shared_prefix_len < 0:
            raise WorkloadError("shared_prefix_len must be >= 0")
        if self.on_bad_line not in BAD_LINE_POLICIES:
            raise WorkloadError(f"on_bad_line must be one of {', '.join(BAD_LINE_POLICIES)}")
        if not 0 <= self.dataset_part < self.dataset_parts:
            raise WorkloadError("dataset_part must be in [0, dataset_parts)")

    @property
    def key(self) -> str:
        """What seeds every random draw of the prompts: the seed, else the run's salt."""
        return str(self.seed) if self.seed is not None else f"salt-{self.salt}"

    def longest_request(self) -> tuple[int, int] | None:
        """(prompt, output) tokens of the longest request this workload sends, the shared
        prefix in the prompt (before the chat template's own); None for a dataset's
        prompts, whose lengths only the dataset knows."""
        if self.dataset is not None:
            return None
        prompt = self.shared_prefix_len + _span(self.input_len, self.range_ratio)[1]
        return prompt, _span(self.output_len, self.range_ratio)[1]

    @property
    def prompts_origin(self) -> str:
        """How the run chose its prompts, in words (summaries and stored runs say it)."""
        if self.seed is not None:
            return f"seeded: --seed {self.seed} sends the same prompts again"
        return "fresh: drawn for this run (pass --seed to reproduce a workload)"


@dataclass(frozen=True, slots=True)
class PromptItem:
    prompt: str
    input_len: int
    """Intended prompt tokens (approximate: see the module note); a dataset's prompt
    without a stated length: its words."""
    output_len: int
    template_len: int = 0
    """Tokens the chat template adds around the prompt, where they were measured."""
    from_dataset: bool = False
    """A dataset's prompt whose length the dataset does not state (``input_len`` counts
    words): no tokens were asked for."""

    @property
    def engine_input_len(self) -> int | None:
        """Prompt tokens the engine should count (None: a dataset's, not requested)."""
        return None if self.from_dataset else self.input_len + self.template_len


def _span(length: int, ratio: float) -> tuple[int, int]:
    return max(1, int(length * (1 - ratio))), max(1, int(length * (1 + ratio)))


def draw_lengths(workload: Workload, number: int) -> tuple[int, int]:
    """(prompt, output) tokens of request ``number``, each uniform in [L(1−r), L(1+r)]
    and seeded by (seed, number): what ``PromptSource.item`` sends, without the text
    (simulations use it).  The prompt length leaves out any shared prefix."""
    rng = random.Random(f"{workload.key}-{number}")
    in_lo, in_hi = _span(workload.input_len, workload.range_ratio)
    out_lo, out_hi = _span(workload.output_len, workload.range_ratio)
    return rng.randint(in_lo, in_hi), rng.randint(out_lo, out_hi)


class TokenSizer(Protocol):
    """Builds text of an exact token count in one engine's tokens (``loadgen.sizing``)."""

    @property
    def template_tokens(self) -> int | None: ...

    def assemble(self, rng: random.Random, tokens: int, *, first: bool) -> tuple[str, int]: ...


class PromptSource:
    """Deterministic prompts by request number: the same seed gives the same run."""

    def __init__(self, workload: Workload, sizer: TokenSizer | None = None) -> None:
        self._w = workload
        self._sizer = sizer
        self.dataset: DatasetScan | None = None
        self._reader: DatasetReader | None = None
        if workload.dataset:
            self.dataset = scan(workload.dataset, workload.on_bad_line)
            self._reader = DatasetReader(
                workload.dataset, workload.on_bad_line, self.dataset.entries
            )
        prefix_rng = random.Random(f"prefix-{workload.key}")
        self._prefix_len = workload.shared_prefix_len
        if sizer is not None and workload.shared_prefix_len:
            self._prefix, self._prefix_len = sizer.assemble(
                prefix_rng, workload.shared_prefix_len, first=True
            )
        else:
            self._prefix = " ".join(prefix_rng.choices(WORDS, k=workload.shared_prefix_len))

    def item(self, number: int) -> PromptItem:
        w = self._w
        n_in, n_out = draw_lengths(w, number)
        if self._reader is not None:
            entry = self._reader.entry(number * w.dataset_parts + w.dataset_part)
            n_out = entry.output_len or n_out
            if entry.input_len is None:
                n_words = len(entry.prompt.split())
                return PromptItem(self._join(entry.prompt), n_words, n_out, from_dataset=True)
            template = (self._sizer.template_tokens or 0) if self._sizer is not None else 0
            tokens = entry.input_len + self._prefix_len
            return PromptItem(self._join(entry.prompt), tokens, n_out, template)
        rng = random.Random(f"{w.key}-{number}-words")
        if self._sizer is not None:  # random words of exact cost: distinct by the draw
            text, tokens = self._sizer.assemble(rng, n_in, first=not self._prefix)
            template = self._sizer.template_tokens or 0
            return PromptItem(self._join(text), tokens + self._prefix_len, n_out, template)
        # A unique head keeps prompts distinct so only the intended prefix is cacheable.
        words = [f"{number}", *rng.choices(WORDS, k=n_in - 1)]
        text = " ".join(words)
        return PromptItem(self._join(text), n_in + w.shared_prefix_len, n_out)

    def close(self) -> None:
        """Close the dataset file (a new entry asked opens it again)."""
        if self._reader is not None:
            self._reader.close()

    def _join(self, text: str) -> str:
        return f"{self._prefix} {text}" if self._prefix else text
