"""A flat series looks flat: the y axis of a chart spans at least the chart's least span
(in the value's unit) and a tenth of the values, so 0.04 W of wobble is no mountain."""

from __future__ import annotations

import re

from textual.app import App, ComposeResult

from control.model import GpuHistory
from tests.tui.helpers import painted
from tui.charts import Chart, ChartData, Series
from tui.screens.node import CHARTS, chart_data

NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


class OneChart(App[None]):
    def compose(self) -> ComposeResult:
        yield Chart(id="chart")


def y_ticks(text: str) -> list[float]:
    """The numbers plotext writes left of the axis, top to bottom."""
    ticks = []
    for line in text.splitlines():
        left = line.split("┤")[0] if "┤" in line else ""
        found = NUMBER.findall(left)
        if found:
            ticks.append(float(found[-1]))
    return ticks


async def shown_ticks(data: ChartData) -> list[float]:
    app = OneChart()
    async with app.run_test(size=(80, 24)) as pilot:
        chart = app.query_one(Chart)
        chart.show(data)
        await pilot.pause()
        return y_ticks(painted(chart))


def idle_power(watts: list[float]) -> ChartData:
    history = GpuHistory()
    for i, w in enumerate(watts):
        history.ts.append(float(i))
        history.power_w.append(w)
    (_, title, field, ymax, min_span) = next(c for c in CHARTS if c[0] == "power")
    return chart_data(title, field, ymax, {0: history}, min_span)


async def test_an_idle_gpus_power_wobble_is_drawn_flat_on_the_node_screen() -> None:
    ticks = await shown_ticks(idle_power([78.29, 78.31, 78.33, 78.30, 78.29] * 6))
    assert len(ticks) >= 2, ticks
    assert max(ticks) - min(ticks) >= 40, f"0.04 W drawn over {ticks}"
    assert min(ticks) <= 78.29 and max(ticks) >= 78.33


async def test_a_real_change_still_fills_the_chart() -> None:
    ticks = await shown_ticks(idle_power([120.0] * 10 + [690.0] * 10))
    assert min(ticks) >= 100 and max(ticks) <= 700, ticks  # fitted to the data as before


async def test_any_chart_spans_a_tenth_of_its_values_at_least() -> None:
    flat = Series("run", tuple(float(i) for i in range(20)), (4107.0, 4107.5) * 10)
    ticks = await shown_ticks(ChartData("output tok/s during the run", (flat,)))
    assert max(ticks) - min(ticks) >= 300, ticks
    zero_based = Series("gpu0", (0.0, 1.0, 2.0), (0.0, 0.0, 0.001))
    assert ChartData("idle", (zero_based,), min_span=50.0).y_range() == (0.0, 50.0)
