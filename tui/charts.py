"""Charts: a plotext plot drawn afresh from immutable data on every render.

plotext's build transforms the figure's data in place (a log scale replaces the
stored xs by their logarithms, limits are fixed on the first build).  Textual
renders a widget again whenever its size changes, so a figure filled once and
rendered twice took the log of a log (``math domain error``) and ended the app
when the terminal was small or resized.  Here a screen hands the chart frozen
:class:`ChartData`; each render clears the figure and plots that data anew.  A
render that fails anyway (data plotext cannot draw) shows the reason in place of
the chart, as every widget does (``tui.guard``): the tables beside it stay usable.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from rich.text import Text
from textual.app import RenderResult
from textual_plotext import PlotextPlot

MIN_WIDTH_CELLS = 20
MIN_HEIGHT_CELLS = 6
"""Below this plotext draws no readable axis: say so rather than draw noise."""
MIN_RELATIVE_SPAN = 0.1
"""The y axis spans at least this share of the largest value shown: plotext fits the axis
to the data, so an idle GPU's power wobbling between 78.29 and 78.33 W filled the chart
from top to bottom, a mountain out of 0.04 W."""


@dataclass(frozen=True, slots=True)
class Series:
    label: str | None
    xs: tuple[float, ...]
    ys: tuple[float, ...]


@dataclass(frozen=True, slots=True)
class ChartData:
    title: str
    series: tuple[Series, ...] = ()
    xlabel: str = ""
    ylabel: str = ""
    xlog: bool = False
    """Log x axis; applied only when some series has points (plotext cannot scale nothing)."""
    ylim: tuple[float, float] | None = None
    min_span: float = 0.0
    """The least y range shown, in the values' unit (e.g. 50 for watts): a change smaller
    than this looks small. ``MIN_RELATIVE_SPAN`` of the values applies as well."""

    def y_range(self) -> tuple[float, float] | None:
        """The y axis's limits: ``ylim``; else None (fit to the data) where the data spans
        enough, else the data's middle widened to the least span (not below 0 for data that
        is not)."""
        if self.ylim is not None:
            return self.ylim
        ys = [y for s in self.series for y in s.ys if math.isfinite(y)]
        if not ys:
            return None
        lo, hi = min(ys), max(ys)
        least = max(self.min_span, MIN_RELATIVE_SPAN * max(abs(lo), abs(hi)))
        if hi - lo >= least or least == 0:
            return None
        bottom = (lo + hi - least) / 2
        if lo >= 0 > bottom:
            bottom = 0.0
        return bottom, bottom + least


def series_of(label: str | None, xs: Iterable[float], ys: Iterable[float | None]) -> Series | None:
    """The (x, y) pairs of ``xs`` and ``ys`` whose y is known; None when there are none."""
    pairs = [(x, y) for x, y in zip(xs, ys, strict=True) if y is not None]
    if not pairs:
        return None
    px, py = zip(*pairs, strict=True)
    return Series(label, tuple(px), tuple(py))


class Chart(PlotextPlot):
    """The one chart widget every screen uses: :meth:`show` data, it draws itself."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._data = ChartData("")

    def show(self, data: ChartData) -> None:
        if data != self._data:
            self._data = data
            self.refresh()

    def render(self) -> RenderResult:
        data = self._data
        width, height = self.size
        if width < MIN_WIDTH_CELLS or height < MIN_HEIGHT_CELLS:
            return Text(f"{data.title}: too small to plot, enlarge the terminal", style="dim")
        self._plot_afresh(data)
        return super().render()

    def _plot_afresh(self, data: ChartData) -> None:
        plt = self.plt
        plt.clear_figure()
        plt.title(data.title)
        if data.xlabel:
            plt.xlabel(data.xlabel)
        if data.ylabel:
            plt.ylabel(data.ylabel)
        for s in data.series:
            plt.plot(list(s.xs), list(s.ys), label=s.label, marker="braille")
        if data.xlog and data.series:
            plt.xscale("log")
        y_range = data.y_range()
        if y_range is not None:
            plt.ylim(*y_range)
