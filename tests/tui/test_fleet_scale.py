"""The Fleet screen at 256 nodes x 8 GPUs (issue 23, point 12): its tables make and paint
only the rows in view, so these check that what is painted is still the newest truth,
wherever and whenever a row changed, and that the operator's place and order hold."""

from __future__ import annotations

import dataclasses
from typing import Any

from textual.geometry import Region
from textual.widget import Widget

from telemetry import TelemetryFrame
from tests.tui.conftest import EPOCH, fleet_frames, frozen_app
from tests.tui.helpers import wait_until
from tui.app import InferTopApp
from tui.fasttable import PAD, FastTable

NODES = 256
GPUS = 8
NAMES = [f"h200-{i:02d}" for i in range(NODES)]
BASE_UTIL = 50.0


def frame_of(
    template: TelemetryFrame, node: str, seq: int, util: dict[int, float] | None = None
) -> TelemetryFrame:
    """``template`` as ``node``'s frame ``seq``: every GPU at BASE_UTIL % unless ``util``
    gives it another value."""
    util = util or {}
    gpus = tuple(
        dataclasses.replace(g, util_pct=util.get(g.index, BASE_UTIL)) for g in template.gpus
    )
    return dataclasses.replace(template, node=node, seq=seq, ts=EPOCH + seq, gpus=gpus)


def on_screen(widget: Widget) -> list[str]:
    """What the compositor takes of ``widget``: its painted lines, kept until repainted."""
    region = Region(0, 0, widget.size.width, widget.size.height)
    return [strip.text for strip in widget.render_lines(region)]


def util_shown(table: FastTable[Any], node: str, gpu: int) -> str | None:
    """The Util cell painted in ``node``'s GPU ``gpu`` row, None when it is not in view."""
    labels = [label for label, _ in table.columns]
    start = sum(width + 2 * PAD for _, width in table.columns[: labels.index("Util")]) + PAD
    width = table.columns[labels.index("Util")][1]
    for line in on_screen(table):
        if line.split()[:2] == [node, str(gpu)]:
            return line[start : start + width].strip()
    return None


async def fleet_of_256(app: InferTopApp, pilot: Any) -> TelemetryFrame:
    """Every node's first frame shown; returns the frame the others are made from."""
    (template,) = fleet_frames("template", GPUS, range(1))
    for name in NAMES:
        app.ingest(name, frame_of(template, name, 1))
    app.redraw_now()
    gpus = app.screen.query_one("#gpus", FastTable)
    await wait_until(pilot, lambda: gpus.row_count == NODES * GPUS, "2,048 GPU rows")
    return template


async def test_a_changed_row_is_painted_once_scrolled_into_view_and_in_view() -> None:
    app = frozen_app()
    async with app.run_test(size=(120, 40)) as pilot:
        template = await fleet_of_256(app, pilot)
        gpus = app.screen.query_one("#gpus", FastTable)
        await wait_until(pilot, lambda: util_shown(gpus, NAMES[0], 0) == "50%", "the top row")
        # a row far out of view, changed in a late frame: its new value once scrolled to
        last = NAMES[-1]
        assert util_shown(gpus, last, 7) is None
        app.ingest(last, frame_of(template, last, 2, {7: 37.0}))
        app.redraw_now()
        await pilot.pause()
        gpus.focus()
        await pilot.press("end")
        await wait_until(pilot, lambda: util_shown(gpus, last, 7) == "37%", "37% at the end")
        assert util_shown(gpus, last, 6) == "50%"
        assert gpus.cells(f"{last}/7")[3] == "37%"
        # a row in view changed: its line is painted again (the table repaints only those)
        await pilot.press("home")
        await wait_until(pilot, lambda: util_shown(gpus, NAMES[0], 1) == "50%", "back on top")
        app.ingest(NAMES[0], frame_of(template, NAMES[0], 2, {1: 12.0}))
        app.redraw_now()
        await wait_until(pilot, lambda: util_shown(gpus, NAMES[0], 1) == "12%", "12% on top")
        app.ingest(NAMES[0], frame_of(template, NAMES[0], 3, {1: 13.0}))
        app.redraw_now()
        await wait_until(pilot, lambda: util_shown(gpus, NAMES[0], 1) == "13%", "13% on top")
        assert util_shown(gpus, NAMES[0], 0) == "50%"


async def test_selection_sort_and_node_detail_hold_at_256_nodes() -> None:
    app = frozen_app()
    async with app.run_test(size=(120, 40)) as pilot:
        template = await fleet_of_256(app, pilot)
        gpus = app.screen.query_one("#gpus", FastTable)
        gpus.focus()
        await pilot.press("down", "down", "down")
        await wait_until(pilot, lambda: gpus.selected_key == f"{NAMES[0]}/3", "row 3 selected")
        for name in NAMES:  # every node's next frame: the selection stays where it was
            app.ingest(name, frame_of(template, name, 2, {3: 61.0}))
        app.redraw_now()
        await wait_until(pilot, lambda: util_shown(gpus, NAMES[0], 3) == "61%", "61% on row 3")
        assert gpus.selected_key == f"{NAMES[0]}/3"
        # by GPU util: a late frame of a node far down puts its busy GPU on top
        await pilot.press("o")
        busy = NAMES[200]
        app.ingest(busy, frame_of(template, busy, 3, {5: 99.0}))
        app.redraw_now()
        await wait_until(pilot, lambda: gpus.keys[:1] == [f"{busy}/5"], "the busiest GPU first")
        await wait_until(pilot, lambda: util_shown(gpus, busy, 5) == "99%", "99% painted on top")
        assert [util_shown(gpus, n, 3) for n in NAMES[:3]] == ["61%"] * 3  # next: 61 %
        # the node detail pane opens the node selected in the node table
        nodes = app.screen.query_one("#nodes", FastTable)
        nodes.focus()
        await pilot.press("end")
        await wait_until(pilot, lambda: nodes.selected_key == NAMES[-1], "the last node")
        await pilot.press("enter")
        await wait_until(pilot, lambda: app.current_mode == "node", "the Node screen")
        assert app.selected_node == NAMES[-1]
