"""Requested vs sent, always visible (issue 19, point 2): a run whose engine counted
more than 5 % off the requested tokens says so in the bench summary, carries it in the
stored run, and the History screen's run summary shows it."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path

from aiohttp import web

from store import open_store
from tests.loadgen import conftest as loadgen_conftest
from tests.loadgen.conftest import Handler, bench
from tests.tui.conftest import SIZE, frozen_app, frozen_services
from tests.tui.helpers import text_of, wait_until

stand_in_engine = loadgen_conftest.serve  # a stand-in engine (it lists model "m")


def _event(obj: object) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


async def three_tokens_a_word(request: web.Request) -> web.StreamResponse:
    """Counts three prompt tokens per word sent (a small vocabulary) and answers one token."""
    body = await request.json()
    words = len(body["messages"][0]["content"].split())
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    await resp.write(_event({"choices": [{"index": 0, "delta": {"content": "x"}}]}))
    usage = {"prompt_tokens": 3 * words, "completion_tokens": 1}
    await resp.write(_event({"choices": [], "usage": usage}))
    await resp.write(b"data: [DONE]\n\n")
    return resp


async def test_a_deviating_run_warns_in_the_summary_the_store_and_the_history_screen(
    stand_in_engine: Callable[[Handler], Awaitable[str]], tmp_path: Path
) -> None:
    url = await stand_in_engine(three_tokens_a_word)
    db = tmp_path / "runs.db"
    code, out, err = await bench(
        "--url", url, "--model", "m", "--requests", "4", "--input-len", "16",
        "--output-len", "1", "--save", "--db", str(db),
    )  # fmt: skip
    assert code == 0, err
    assert "tokens at c=1: input requested 16/16/16, engine 48/48/48" in out
    warning = "c=1: the engine counted 48 input tokens per request, 16 were requested (+200%)"
    assert f"warning: {warning}" in out

    store = open_store(db)
    try:
        (run,) = store.list_runs()
        (level,) = store.levels(run.run_id)
        assert (level.summary.input_requested.p50, level.summary.input_sent.p99) == (16, 48)
        app = frozen_app(frozen_services(store=store))
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("6")
            runs = app.screen.query_one("#runs")
            await wait_until(pilot, lambda: runs.row_count == 1, "the stored run")  # type: ignore[attr-defined]
            await pilot.press("enter")
            await wait_until(
                pilot, lambda: warning in text_of(pilot, "#levels-title"), "the run's warning"
            )
    finally:
        store.close()
