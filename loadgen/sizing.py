"""Prompts sized in the engine's own tokens.

A synthetic prompt of *L tokens* is built from common words whose cost in the
engine's tokenizer was measured before the run (its ``tokenize`` route in the catalog:
llama.cpp, vLLM, SGLang, TGI; Ollama's untemplated one-token generation, whose
``prompt_eval_count`` is the prompt's tokens): each word's tokens after another word, and
as the first word of a prompt.  Words are drawn until the prompt holds exactly L tokens,
so a small vocabulary (where a word is several tokens) gets prompts of the asked size,
not L words.
One calibration request measures what the chat template (and BOS) adds: it is reported
apart and counted in what each request asks the engine to count.  The costs are cached
per engine URL, kind and model.  Where nothing tokenizes, prompts stay words and the run
says so.  (No offline Hugging Face tokenizer: ``tokenizers`` is not a dependency.)
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import random
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import aiohttp

from engines.catalog import get_spec
from engines.catalog.types import TokenizeRoute
from loadgen import openai_stream
from loadgen.datasets import DatasetScan
from loadgen.workload import WORDS, PromptSource, Workload
from runs.setup import RunSetup

if TYPE_CHECKING:
    from loadgen.runner import Target

ANCHOR = "the"
"""The word each word's in-context cost is measured after; every sized prompt also
begins and ends with it, so the chat template's text meets the same word in every
prompt as in the calibration request (a template whose end marker is plain text in a
small vocabulary merges with the last word)."""
CALLS_AT_ONCE = 8
TIMEOUT_S = 30.0


class SizingError(Exception):
    """The engine did not tokenize as its catalog entry says (why, in words)."""


@dataclass(frozen=True, slots=True)
class Sizing:
    """Word costs in one engine's tokens, and what its template adds to a prompt."""

    method: str
    """Where the counts came from, e.g. "llamacpp /tokenize"."""
    costs: tuple[tuple[str, int], ...]
    """Tokens of each word after another word."""
    head_costs: tuple[tuple[str, int], ...]
    """Tokens of each word as the first of a prompt."""
    template_tokens: int | None
    """Tokens the engine counts beyond the prompt's own (chat template, BOS); None
    when the calibration request reported no usage."""

    def assemble(self, rng: random.Random, tokens: int, *, first: bool) -> tuple[str, int]:
        """Words of exactly ``tokens`` tokens where the costs allow (a one-token word
        closes any gap), starting (``first``: the prompt's start) and ending with the
        anchor word; returns the text and the tokens it holds."""
        head, tail = dict(self.head_costs).get(ANCHOR), dict(self.costs).get(ANCHOR)
        words: list[str] = []
        left = tokens
        if first and head is not None and head <= left:
            words.append(ANCHOR)
            left -= head
        end = tail is not None and (words or not first) and tail <= left
        left -= tail if end and tail is not None else 0
        while left > 0:
            table = self.head_costs if first and not words else self.costs
            fits = [(word, cost) for word, cost in table if cost <= left]
            if not fits:
                break
            word, cost = rng.choice(fits)
            words.append(word)
            left -= cost
        if end:
            words.append(ANCHOR)
        return " ".join(words), tokens - left

    def describe(self, workload: Workload) -> str:
        template = (
            "chat template and special tokens not measured (no usage in the answer)"
            if self.template_tokens is None
            else f"+ {self.template_tokens} tokens of chat template and special tokens"
        )
        return f"prompts sized by the engine's tokenizer ({self.method}): {template}"


@dataclass(frozen=True, slots=True)
class SizedPrompts:
    source: PromptSource
    text: str
    """How the prompts were sized, for the stored run and the summary."""
    warning: str | None = None
    """Set when the prompts could not be sized in tokens (or a dataset's lines were
    skipped)."""

    def describe(self, setup: RunSetup) -> RunSetup:
        """``setup`` saying how the run's prompts were sized and, for a dataset, which
        file it was (name and SHA-256: what Compare tells workloads apart by) and how it
        was read."""
        facts: dict[str, object] = {"sizing": self.text}
        scanned = self.source.dataset
        if scanned is not None:
            facts |= {"dataset_id": scanned.identity(), "dataset_read": scanned.facts()}
        return dataclasses.replace(setup, workload={**setup.workload, **facts})


_CACHE: dict[tuple[str, str, str, bool], Sizing] = {}


async def sized_prompts(workload: Workload, target: Target) -> SizedPrompts:
    """The run's prompts, sized in the engine's tokens where it can tokenize."""
    plain = PromptSource(workload)  # a bad workload fails here, before any call to the engine
    if plain.dataset is not None:
        return await _dataset_prompts(workload, target, plain.dataset)
    route = _route(target.engine_kind)
    if route is None:
        return _words(workload, f"engine {target.engine_kind!r} has no tokenize route")
    try:
        sizing = await _sizing(route, target)
    except (SizingError, aiohttp.ClientError, TimeoutError) as exc:
        return _words(workload, f"its tokenize route failed ({exc or type(exc).__name__})")
    return SizedPrompts(PromptSource(workload, sizing), sizing.describe(workload))


async def _sizing(route: TokenizeRoute, target: Target) -> Sizing:
    key = (target.url, target.engine_kind, target.model, target.chat)
    sizing = _CACHE.get(key)
    if sizing is None:
        sizing = _CACHE[key] = await calibrate(route, target)
    return sizing


async def _dataset_prompts(workload: Workload, target: Target, found: DatasetScan) -> SizedPrompts:
    """A dataset's prompts as they are; where its lines state their prompt tokens, the
    chat template's tokens (measured where the engine tokenizes) are added to what the
    engine should count."""
    text = f"dataset prompts, as {found.name} has them"
    route = _route(target.engine_kind)
    sizing = None
    if found.sized_entries and route is not None:
        try:
            sizing = await _sizing(route, target)
        except (SizingError, aiohttp.ClientError, TimeoutError) as exc:
            text += f"; chat template not measured ({exc or type(exc).__name__})"
    if sizing is not None and sizing.template_tokens is not None:
        text += f"; + {sizing.template_tokens} tokens of chat template on stated input lengths"
    return SizedPrompts(PromptSource(workload, sizing), text, found.warning())


def _route(kind: str) -> TokenizeRoute | None:
    try:
        return get_spec(kind).tokenize
    except KeyError:  # "openai": an engine of no known kind
        return None


def _words(workload: Workload, why: str) -> SizedPrompts:
    warning = (
        f"prompts are common words, not sized in the engine's tokens: {why}, so "
        f"--input-len {workload.input_len} counts words (the engine's own count is in "
        "every record; name the engine with --engine where it can tokenize)"
    )
    return SizedPrompts(PromptSource(workload), f"words ({why})", warning)


async def calibrate(route: TokenizeRoute, target: Target) -> Sizing:
    """Measure every word's cost and the template's tokens: a few calls, before the run."""
    headers = {"Authorization": f"Bearer {target.api_key}"} if target.api_key else None
    timeout = aiohttp.ClientTimeout(total=TIMEOUT_S)
    gate = asyncio.Semaphore(CALLS_AT_ONCE)
    root = target.url.rstrip("/").removesuffix("/v1")
    # llama-server drops a kept-alive socket between calls: reused, it answers "Server
    # disconnected" on a busy machine, so such an engine gets a fresh socket per call
    connector = aiohttp.TCPConnector(force_close=not target.reuses_connections)
    async with aiohttp.ClientSession(
        connector=connector, timeout=timeout, headers=headers
    ) as session:

        async def count(text: str) -> int:
            async with (
                gate,
                session.post(root + route.path, json=route.body(text, target.model)) as r,
            ):
                if r.status != 200:
                    raise SizingError(f"{route.path} answered HTTP {r.status}")
                try:
                    tokens = route.count(await r.json(content_type=None))
                except ValueError:
                    raise SizingError(f"{route.path} did not answer JSON") from None
            if tokens is None:
                raise SizingError(f"{route.path} answered no token count")
            return tokens

        anchor = await count(ANCHOR)
        after = await asyncio.gather(*(count(f"{ANCHOR} {w}") for w in WORDS))
        alone = await asyncio.gather(*(count(w) for w in WORDS))
        costs = tuple((w, n - anchor) for w, n in zip(WORDS, after, strict=True) if n > anchor)
        heads = tuple((w, n) for w, n in zip(WORDS, alone, strict=True) if n > 0)
        if not costs or not heads:
            raise SizingError(f"{route.path} counted no token in common words")
        sizing = Sizing(f"{get_spec(target.engine_kind).kind} {route.path}", costs, heads, None)
        sample, _ = sizing.assemble(random.Random(0), 64, first=True)
        template = await _template_tokens(session, target, sample, await count(sample))
    return dataclasses.replace(sizing, template_tokens=template)


async def _template_tokens(
    session: aiohttp.ClientSession, target: Target, prompt: str, prompt_tokens: int
) -> int | None:
    """What the engine counts beyond ``prompt``'s own tokens, by one request's usage."""
    body: dict[str, Any] = json.loads(
        openai_stream.build_body(
            model=target.model, prompt=prompt, max_tokens=1, chat=target.chat, include_usage=False
        )
    )
    body["stream"] = False
    async with session.post(openai_stream.endpoint_url(target.url, target.chat), json=body) as r:
        if r.status != 200:
            raise SizingError(f"the calibration request answered HTTP {r.status}")
        try:
            answer: object = await r.json(content_type=None)
        except ValueError:
            raise SizingError("the calibration request did not answer JSON") from None
    usage = answer.get("usage") if isinstance(answer, dict) else None
    counted = usage.get("prompt_tokens") if isinstance(usage, dict) else None
    return counted - prompt_tokens if isinstance(counted, int) else None
