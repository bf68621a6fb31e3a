"""Prompt sizing against a stand-in engine whose vocabulary is one token per letter
(every word several tokens, as in the rig's 1,024-token model): the prompts hold the
asked tokens exactly by its count, and its chat template is measured apart."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from loadgen import ClosedLoop, LoadSpec, MemorySink, Target, Workload, run_load
from runs.events import RunEvent, RunStarted

TEMPLATE = 7
"""Tokens this engine's chat template adds around every prompt."""


def letters(text: str) -> int:
    """The stand-in's tokenizer: a token per letter, a space is a token too."""
    return len(text)


@pytest.fixture
async def letter_engine() -> AsyncIterator[str]:
    async def tokenize(request: web.Request) -> web.Response:
        body = await request.json()
        return web.json_response({"tokens": list(range(letters(body["content"])))})

    async def chat(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        counted = letters(body["messages"][0]["content"]) + TEMPLATE
        usage = {"prompt_tokens": counted, "completion_tokens": 1}
        if not body.get("stream"):  # the calibration request
            return web.json_response({"choices": [], "usage": usage})
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        chunk = {"choices": [{"index": 0, "delta": {"content": "x"}}]}
        for data in (chunk, {"choices": [], "usage": usage}):
            await resp.write(b"data: " + json.dumps(data).encode() + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        return resp

    app = web.Application()
    app.router.add_post("/tokenize", tokenize)
    app.router.add_post("/v1/chat/completions", chat)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


async def test_prompts_hold_the_asked_tokens_where_words_are_several_tokens(
    letter_engine: str,
) -> None:
    sink = MemorySink()
    events: list[RunEvent] = []
    workload = Workload(input_len=128, output_len=1, range_ratio=0.5, shared_prefix_len=20)
    target = Target(letter_engine, "m", engine_kind="llamacpp")
    spec = LoadSpec((ClosedLoop(2),), requests_per_level=10)
    await run_load(spec, workload, target, sink, events.append)
    started = next(e for e in events if isinstance(e, RunStarted))
    assert started.setup.workload["sizing"] == (
        f"prompts sized by the engine's tokenizer (llamacpp /tokenize): + {TEMPLATE} tokens "
        "of chat template and special tokens"
    )
    assert not [w for w in started.warnings if "not sized" in w]
    for r in sink.records:
        assert r.requested_prompt_tokens is not None
        asked = r.requested_prompt_tokens - TEMPLATE - 20  # the shared prefix's 20 apart
        assert 64 - 2 <= asked <= 192 + 2  # the range's ends, within the issue's +-2 tokens
        assert r.prompt_tokens == r.requested_prompt_tokens  # exact, by its own count
