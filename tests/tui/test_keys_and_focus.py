"""Keys and focus as operators of nvitop and k9s expect them: `?` lists every key of every
screen (read from the bindings), a text field takes printable keys as text and Esc leaves
it, space picks a GPU at once, the fleet filter filters rows within a node, and a load
test's target never switches silently when its engine stops."""

from __future__ import annotations

import dataclasses
from typing import Any

from textual.widgets import Input, Select, SelectionList

from telemetry import EngineTelemetry
from tests.tui.conftest import (
    NODE_PROCESSES,
    SIZE,
    VLLM_WORKERS,
    engines_at_load,
    fleet_frames,
    frozen_app,
)
from tests.tui.helpers import text_of, wait_until
from tui.app import SCREENS_BY_MODE
from tui.fasttable import FastTable
from tui.keys import bindings_of


async def test_help_lists_every_key_of_every_screen_from_their_bindings() -> None:
    """The hand-written page missed keys (the Load screen's `c` cancel, the filters' Esc)."""
    app = frozen_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("question_mark")
        await wait_until(pilot, lambda: bool(app.screen.query("#help-text")), "the help")
        shown = " ".join(text_of(pilot, "#help-text").split())
        for screen in SCREENS_BY_MODE.values():
            for binding in bindings_of(screen):
                line = f"{app.get_key_display(binding)} {binding.description}"
                assert line in shown, (screen.__name__, line)
        assert "c Cancel run" in shown and "space Toggle option" in shown
        await pilot.press("escape")
        await wait_until(pilot, lambda: not app.screen.query("#help-text"), "the help closed")


async def test_a_text_field_takes_keys_as_text_and_esc_leaves_it() -> None:
    app = frozen_app()
    async with app.run_test(size=SIZE) as pilot:
        for frame in fleet_frames("h200-0", 2, range(3), engines_at_load()):
            app.ingest("h200-0", frame)
        await pilot.press("3")
        await wait_until(pilot, lambda: app.current_mode == "engines", "the Engines screen")
        context = app.screen.query_one("#context", Input)
        context.focus()
        await pilot.press("5", "1", "2", "x", "q", "w")  # x, q, w are no digits: not text
        await pilot.pause()
        assert app.is_running and not app.screen.query("#yes")  # nothing stopped or quit
        assert context.value == "512" and app.screen.focused is context
        await pilot.press("escape")
        assert not isinstance(app.screen.focused, Input)
        await pilot.press("4")  # a shortcut again, once out of the field
        await wait_until(pilot, lambda: app.current_mode == "load", "the Load screen")


async def test_space_picks_the_first_gpu_at_once() -> None:
    app = frozen_app()
    async with app.run_test(size=SIZE) as pilot:
        for frame in fleet_frames("h200-0", 2, range(3), engines_at_load()):
            app.ingest("h200-0", frame)
        await pilot.press("3")
        await wait_until(pilot, lambda: app.current_mode == "engines", "the Engines screen")
        gpus = app.screen.query_one("#gpus", SelectionList)
        await wait_until(pilot, lambda: gpus.option_count == 2, "the node's GPUs")
        gpus.focus()
        await pilot.press("space")  # before: nothing, until Down highlighted a GPU
        assert gpus.selected == [0]


async def test_the_fleet_filter_keeps_only_the_matching_rows_of_a_node() -> None:
    """Filtering by an engine kept its node with every GPU and engine of it."""
    app = frozen_app()
    async with app.run_test(size=SIZE) as pilot:
        frames = fleet_frames(
            "h200-0", 6, range(3), engines_at_load(), processes=NODE_PROCESSES, owners=VLLM_WORKERS
        )
        last = frames[-1]  # vllm-a's workers on GPUs 0 and 1 only
        idle = tuple(dataclasses.replace(g, processes=()) for g in last.gpus[2:])
        frames[-1] = dataclasses.replace(last, gpus=(*last.gpus[:2], *idle))
        for frame in frames:
            app.ingest("h200-0", frame)
        app.redraw_now()
        gpus = app.screen.query_one("#gpus", FastTable)
        engines = app.screen.query_one("#engines", FastTable)
        await wait_until(pilot, lambda: len(gpus.keys) == 6, "the six GPUs")
        await pilot.press("slash", *"ollama")
        await wait_until(pilot, lambda: len(engines.keys) == 1, "the filtered engines")
        assert engines.keys == ["h200-0/ollama-b"]
        assert gpus.keys == []  # no process of ollama-b on any GPU
        box = app.screen.query_one("#filter", Input)
        box.value = "vllm"
        await wait_until(pilot, lambda: len(gpus.keys) == 2, "vllm-a's two GPUs")
        assert gpus.keys == ["h200-0/0", "h200-0/1"]
        assert engines.keys == ["h200-0/vllm-a"]
        box.value = "h200-0"  # the node's name: every row of it
        await wait_until(pilot, lambda: len(gpus.keys) == 6, "every GPU again")
        assert len(engines.keys) == 2


def _healthy(engine_id: str, port: int) -> EngineTelemetry:
    return EngineTelemetry(
        id=engine_id,
        kind="vllm",
        state="ready",
        health="healthy",
        simulated=True,
        url=f"http://127.0.0.1:{port}/",
    )


async def test_a_load_targets_engine_that_stops_is_said_gone_not_replaced() -> None:
    app = frozen_app()
    both = (_healthy("vllm-a", 9), _healthy("vllm-b", 10))
    async with app.run_test(size=SIZE) as pilot:
        frames = fleet_frames("h200-0", 2, range(3), both)
        for frame in frames[:2]:
            app.ingest("h200-0", frame)
        await pilot.press("4")
        await wait_until(pilot, lambda: app.current_mode == "load", "the Load screen")
        screen: Any = app.screen
        await wait_until(pilot, lambda: len(screen.target_keys) == 2, "both targets")
        target = screen.query_one("#target", Select)
        target.value = "h200-0/vllm-b"
        await pilot.pause()
        app.ingest("h200-0", dataclasses.replace(frames[2], engines=both[:1]))  # b stopped
        app.redraw_now()
        await wait_until(pilot, lambda: screen.target_keys == ["h200-0/vllm-a"], "b gone")
        await pilot.pause()
        assert target.is_blank()  # before: vllm-a, silently
        status = text_of(pilot, "#load-status")
        assert "target h200-0/vllm-b is gone: its engine stopped" in status, status
        await pilot.press("r")  # no target: the run asks for one, none starts
        await pilot.pause()
        assert screen.running_target is None
