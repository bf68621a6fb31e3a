"""What the load generator asks: synthetic, shared-prefix or ShareGPT prompts.

Every run draws fresh prompts (a per-run salt) unless a seed is given: a run that
re-sent an earlier run's prompts would measure that run's prefix cache, not the engine.

Where the engine tokenizes for a client (``loadgen.sizing``), a synthetic prompt of
*L tokens* holds exactly L of its tokens.  Elsewhere it is L common short English
words, each a single token in the usual large BPE vocabularies (not in small ones: the
run then says its prompts were not sized).  The engine's ``usage.prompt_tokens`` in
every record says what it really counted.
"""

from __future__ import annotations

import json
import random
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

# Words that are one token (with their leading space) in Llama, GPT and Qwen vocabularies.
WORDS = (
    "the of and to in is was for on that with as by at from his her are be this which "
    "or an had not but were they have one all their has been more who can there when "
    "new first also time after other into two only over its most some would about than "
    "city year state world many work part made where water used good long day house"
).split()


class WorkloadError(ValueError):
    """A workload that cannot be built (bad numbers, unreadable dataset)."""


@dataclass(frozen=True, slots=True)
class Workload:
    input_len: int = 512
    output_len: int = 128
    range_ratio: float = 0.0
    """Lengths are drawn uniformly from [L(1−r), L(1+r)] (vLLM's meaning)."""
    shared_prefix_len: int = 0
    """Tokens of one prefix put before every prompt (prefix-cache workloads)."""
    dataset: str | None = None
    """A ShareGPT-format JSON file; its first human turn is each prompt."""
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
    """Intended prompt tokens (approximate: see the module note)."""
    output_len: int
    template_len: int = 0
    """Tokens the chat template adds around the prompt, where they were measured."""
    from_dataset: bool = False
    """A dataset's prompt: its length was never asked for (``input_len`` counts words)."""

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


def load_sharegpt(path: str | Path) -> list[str]:
    """The first human turn of each answered conversation in a ShareGPT JSON file.

    Output lengths come from the workload (forced where the engine can), so the
    recorded answers are not used.
    """
    try:
        data: Any = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise WorkloadError(f"cannot read ShareGPT dataset {path}: {exc}") from exc
    if not isinstance(data, list):
        raise WorkloadError(f"{path}: a ShareGPT file is a JSON list of conversations")
    prompts: list[str] = []
    for entry in data:
        turns = entry.get("conversations") if isinstance(entry, dict) else None
        if not isinstance(turns, list) or len(turns) < 2:
            continue
        first, second = turns[0], turns[1]
        if not (isinstance(first, dict) and isinstance(second, dict)):
            continue
        question, answer = first.get("value"), second.get("value")
        if isinstance(question, str) and question.strip() and isinstance(answer, str):
            prompts.append(question)
    if not prompts:
        raise WorkloadError(f"{path}: no conversation with a human turn and an answer")
    return prompts


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
        self._dataset = load_sharegpt(workload.dataset) if workload.dataset else None
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
        if self._dataset is not None:
            question = self._dataset[number % len(self._dataset)]
            n_words = len(question.split())
            return PromptItem(self._join(question), n_words, n_out, from_dataset=True)
        rng = random.Random(f"{w.key}-{number}-words")
        if self._sizer is not None:  # random words of exact cost: distinct by the draw
            text, tokens = self._sizer.assemble(rng, n_in, first=not self._prefix)
            template = self._sizer.template_tokens or 0
            return PromptItem(self._join(text), tokens + self._prefix_len, n_out, template)
        # A unique head keeps prompts distinct so only the intended prefix is cacheable.
        words = [f"{number}", *rng.choices(WORDS, k=n_in - 1)]
        text = " ".join(words)
        return PromptItem(self._join(text), n_in + w.shared_prefix_len, n_out)

    def _join(self, text: str) -> str:
        return f"{self._prefix} {text}" if self._prefix else text
