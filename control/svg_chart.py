"""Line charts as standalone SVG text: one line per run, for the HTML report and slides.

Drawn here in Python, so a report is one file that opens anywhere without a script or a
font fetched.  Concurrency doubles from level to level, so the x axis is logarithmic
(base 2) where every x is positive; the y axis starts at 0 with round ticks.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

# Okabe-Ito: told apart by colour-blind readers too.
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000")
WIDTH_PX, HEIGHT_PX = 720, 380
_MARGIN = {"left": 70, "right": 20, "top": 36, "bottom": 52}
_LEGEND_ROW_PX = 18


@dataclass(frozen=True, slots=True)
class Series:
    label: str
    points: tuple[tuple[float, float], ...]
    """(x, y), in x order; a level without a value is left out, never drawn at 0."""
    dashed: bool = False
    """A simulated run's line: dashed, so it is told apart from measurements in print."""


def nice_ticks(top: float, count: int = 5) -> list[float]:
    """0 and round steps (1, 2, 5 x 10^k) up to at least ``top``."""
    if top <= 0 or not math.isfinite(top):
        return [0.0, 1.0]
    raw = top / count
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    return [i * step for i in range(math.ceil(top / step - 1e-9) + 1)]


def _label(value: float) -> str:
    if value == 0:
        return "0"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:g}"


def line_chart(title: str, x_label: str, y_label: str, series: Sequence[Series]) -> str:
    """An ``<svg>`` element with one ``<path>`` per series, markers with their values as
    tooltips, axes, ticks and a legend below."""
    drawn = [s for s in series if s.points]
    xs = sorted({x for s in drawn for x, _ in s.points})
    ys = [y for s in drawn for _, y in s.points]
    legend_h = _LEGEND_ROW_PX * len(series)
    height = HEIGHT_PX + legend_h
    left, top = _MARGIN["left"], _MARGIN["top"]
    plot_w = WIDTH_PX - left - _MARGIN["right"]
    plot_h = HEIGHT_PX - top - _MARGIN["bottom"]
    log_x = bool(xs) and xs[0] > 0
    fx = math.log2 if log_x else float
    lo = fx(xs[0]) if xs else 0.0
    hi = fx(xs[-1]) if xs else 1.0
    span = (hi - lo) or 1.0
    y_ticks = nice_ticks(max(ys, default=0.0))
    y_top = y_ticks[-1] or 1.0

    def px(x: float) -> float:
        return left + (fx(x) - lo) / span * plot_w if len(xs) > 1 else left + plot_w / 2

    def py(y: float) -> float:
        return top + plot_h - y / y_top * plot_h

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH_PX} {height}" '
        f'width="{WIDTH_PX}" height="{height}" role="img" aria-label="{escape(title)}" '
        'font-family="sans-serif" font-size="12">',
        f"<title>{escape(title)}</title>",
        f'<rect width="{WIDTH_PX}" height="{height}" fill="#ffffff"/>',
        f'<text x="{WIDTH_PX / 2}" y="20" text-anchor="middle" font-size="14" '
        f'font-weight="bold">{escape(title)}</text>',
    ]
    for t in y_ticks:
        y = py(t)
        out.append(
            f'<line x1="{left}" y1="{y:.1f}" x2="{left + plot_w}" y2="{y:.1f}" stroke="#e5e5e5"/>'
            f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{_label(t)}</text>'
        )
    for x in xs:
        X = px(x)
        out.append(
            f'<line x1="{X:.1f}" y1="{top + plot_h}" x2="{X:.1f}" y2="{top + plot_h + 5}" '
            f'stroke="#333"/><text x="{X:.1f}" y="{top + plot_h + 18}" '
            f'text-anchor="middle">{_label(x)}</text>'
        )
    out.append(
        f'<line x1="{left}" y1="{top + plot_h}" x2="{left + plot_w}" y2="{top + plot_h}" '
        f'stroke="#333"/><line x1="{left}" y1="{top}" x2="{left}" y2="{top + plot_h}" '
        'stroke="#333"/>'
        f'<text x="{left + plot_w / 2}" y="{top + plot_h + 38}" text-anchor="middle">'
        f"{escape(x_label)}</text>"
        f'<text transform="translate(16 {top + plot_h / 2}) rotate(-90)" '
        f'text-anchor="middle">{escape(y_label)}</text>'
    )
    for i, s in enumerate(series):
        colour = PALETTE[i % len(PALETTE)]
        dash = ' stroke-dasharray="6 4"' if s.dashed else ""
        if s.points:
            d = " ".join(
                f"{'M' if k == 0 else 'L'}{px(x):.1f} {py(y):.1f}"
                for k, (x, y) in enumerate(s.points)
            )
            out.append(
                f'<path d="{d}" fill="none" stroke="{colour}" stroke-width="2"{dash}>'
                f"<title>{escape(s.label)}</title></path>"
            )
            for x, y in s.points:
                out.append(
                    f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="3" fill="{colour}">'
                    f"<title>{escape(s.label)}: {_label(x)} -> {y:,.1f}</title></circle>"
                )
        ly = HEIGHT_PX + i * _LEGEND_ROW_PX
        note = "" if s.points else " (no values)"
        out.append(
            f'<line x1="{left}" y1="{ly}" x2="{left + 24}" y2="{ly}" stroke="{colour}" '
            f'stroke-width="2"{dash}/><text x="{left + 30}" y="{ly + 4}">'
            f"{escape(s.label + note)}</text>"
        )
    out.append("</svg>")
    return "\n".join(out)
