"""The report as one self-contained HTML file: inline styles and SVG, no script, and a
Content-Security-Policy that lets the page fetch nothing, so it opens the same offline,
in a mail client or on a colleague's laptop.

Every figure cell carries the store's own number in ``data-value`` (seconds, fractions:
``repr`` of the float) beside the text shown, so a reader's tool, and the tests, can check
the table against the store.
"""

from __future__ import annotations

import datetime as dt
from html import escape

from control.report_data import (
    Column,
    Report,
    ReportLevel,
    ReportRun,
    failures_words,
    level_columns,
)
from control.svg_chart import Series, line_chart

CSP = "default-src 'none'; style-src 'unsafe-inline'"
STYLE = """
body { font-family: sans-serif; margin: 2em auto; max-width: 1400px; color: #222; }
h1 { margin-bottom: 0.2em; } .made { color: #666; margin-top: 0; }
table { border-collapse: collapse; margin: 0.6em 0 1.6em; font-size: 13px; }
th, td { border: 1px solid #ccc; padding: 3px 7px; }
th { background: #f2f2f2; text-align: left; } td.num { text-align: right; }
tr.sim td { font-style: italic; background: #fff8e5; }
.banner { border: 2px solid #d55e00; background: #fff3ec; padding: 0.6em 1em; }
.charts { display: flex; flex-wrap: wrap; gap: 1em; } .note { color: #555; font-size: 13px; }
.charts svg { flex: 1 1 560px; max-width: 720px; height: auto; }
"""
SIM_MARK = "†"


def _when(ts: float | None) -> str:
    return "-" if ts is None else dt.datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M:%S")


def _cell(key: str, value: float | None, scale: float, digits: int) -> str:
    if value is None:
        return f'<td class="num" data-metric="{key}" data-value="">n/a</td>'
    return (
        f'<td class="num" data-metric="{key}" data-value="{value!r}">'
        f"{value * scale:,.{digits}f}</td>"
    )


def _source(run: ReportRun) -> str:
    return f"simulated {SIM_MARK}" if run.info.simulated else "measured"


def _headline(report: Report) -> str:
    h = report.headline
    if h.concurrency is None:
        return "<p>The runs share no closed-loop level, so there is no headline row.</p>"
    head = (
        f"<tr><th>engine</th><th>output tok/s at {h.concurrency} concurrent</th>"
        "<th>TTFT p50 ms</th><th>failed %</th><th>tok/J</th><th>source</th></tr>"
    )
    rows = []
    for run, lv in h.rows:
        cls = ' class="sim"' if run.info.simulated else ""
        cells = "".join(
            _cell(c.key, c.value(lv), c.scale, c.digits) if lv else "<td>-</td>"
            for c in _headline_columns(report)
        )
        rows.append(
            f'<tr{cls} data-run="{escape(run.info.run_id)}">'
            f"<td>{escape(run.label)}</td>{cells}<td>{_source(run)}</td></tr>"
        )
    return f'<table id="headline">{head}{"".join(rows)}</table>'


def _headline_columns(report: Report) -> tuple[Column, ...]:
    keep = ("output_tok_s", "ttft_p50", "failure_rate", "tok_per_j")
    columns = {c.key: c for c in level_columns(report.prices.currency)}
    return tuple(columns[k] for k in keep)


def _charts(report: Report) -> tuple[str, str]:
    def series(value: str) -> list[Series]:
        out = []
        for run in report.runs:
            points = []
            for lv in run.levels:
                c, y = lv.summary.concurrency, _y(lv, value)
                if lv.summary.request_rate is None and c is not None and y is not None:
                    points.append((float(c), y))
            out.append(Series(run.label, tuple(points), dashed=run.info.simulated))
        return out

    return (
        line_chart(
            "Output throughput vs concurrency",
            "concurrent streams",
            "output tok/s",
            series("tok"),
        ),
        line_chart(
            "TTFT p50 vs concurrency", "concurrent streams", "TTFT p50 (ms)", series("ttft")
        ),
    )


def _y(level: ReportLevel, value: str) -> float | None:
    if value == "tok":
        return level.row.output_tok_s
    p50 = level.summary.ttft_s.p50
    return None if p50 is None else p50 * 1000


def chart_files(report: Report) -> dict[str, str]:
    """The charts as standalone SVG files (for slides), by file name."""
    throughput, ttft = _charts(report)
    return {"throughput.svg": throughput, "ttft.svg": ttft}


def _setup(run: ReportRun) -> str:
    rows = "".join(f"<tr><th>{escape(k)}</th><td>{escape(v)}</td></tr>" for k, v in run.setup)
    return f"{_heading(run)}<table>{rows}</table>"


def _heading(run: ReportRun) -> str:
    return f"<h3>{escape(run.label)} <small>[{escape(run.info.run_id)}]</small></h3>"


def _levels(run: ReportRun, columns: tuple[Column, ...]) -> str:
    head = "<tr><th>level</th>" + "".join(f"<th>{escape(c.header)}</th>" for c in columns)
    head += "<th>failures by kind</th><th>energy from</th><th>source</th></tr>"
    rows = []
    for lv in run.levels:
        cls = ' class="sim"' if run.info.simulated else ""
        cells = "".join(_cell(c.key, c.value(lv), c.scale, c.digits) for c in columns)
        rows.append(
            f'<tr{cls} data-run="{escape(run.info.run_id)}" data-level="{lv.summary.level_index}">'
            f"<td>{escape(lv.name)}</td>{cells}<td>{escape(failures_words(lv))}</td>"
            f"<td>{escape(lv.row.energy_source or 'n/a')}</td><td>{_source(run)}</td></tr>"
        )
    return f'{_heading(run)}<table class="levels">{head}{"".join(rows)}</table>'


def _alerts(report: Report) -> str:
    rows = []
    for run in report.runs:
        for a in run.alerts:
            cleared = "active" if a.cleared_at is None else _when(a.cleared_at)
            rows.append(
                f"<tr><td>{escape(run.label)}</td><td>{_when(a.raised_at)}</td>"
                f"<td>{escape(str(a.severity))}</td><td>{escape(a.title)}</td>"
                f"<td>{escape(a.node)} {escape(a.target)}</td><td>{escape(a.message)}</td>"
                f"<td>{escape(cleared)}</td></tr>"
            )
    if not rows:
        return '<p id="alerts">No alert was raised during these runs.</p>'
    head = (
        "<tr><th>run</th><th>raised</th><th>severity</th><th>alert</th><th>on</th>"
        "<th>message</th><th>cleared</th></tr>"
    )
    return f'<table id="alerts">{head}{"".join(rows)}</table>'


def _notes(report: Report) -> str:
    p = report.prices
    lines = [
        "Output tok/s = output tokens over each level's window (first send to last token). "
        "Latencies in milliseconds; n/a = not reported (never 0).",
        f"Cost per million output tokens = price per hour / (3600 x output tok/s) x 10^6, in "
        f"{escape(p.currency)}; per million requests the same with requests/s."
        + (f" Energy at {p.kwh:g} {escape(p.currency)}/kWh." if p.kwh is not None else ""),
    ]
    if not p.configured:
        lines.append("No prices are configured ([cost] in the config, or --price-per-hour).")
    lines += [f"warning: {escape(w)}" for w in report.warnings]
    return "".join(f'<p class="note">{line}</p>' for line in lines)


def render_html(report: Report) -> str:
    columns = level_columns(report.prices.currency)
    throughput, ttft = _charts(report)
    labels = ", ".join(r.label for r in report.runs)
    banner = (
        f'<p class="banner" id="simulated"><strong>Simulated numbers.</strong> Rows marked '
        f"{SIM_MARK} (italic, dashed lines) come from simulated engines calibrated to published "
        "figures, not from measurements of real hardware.</p>"
        if report.simulated
        else ""
    )
    body = [
        f"<h1>Engine comparison: {escape(labels)}</h1>",
        f'<p class="made">made {_when(report.made_at)} by infer-top report from '
        f"{len(report.runs)} stored runs</p>",
        banner,
        "<h2>Headline</h2>",
        _headline(report),
        "<h2>Curves</h2>",
        f'<div class="charts">{throughput}{ttft}</div>',
        "<h2>Per level</h2>",
        *(_levels(r, columns) for r in report.runs),
        "<h2>Alerts during the runs</h2>",
        _alerts(report),
        "<h2>Setup</h2>",
        *(_setup(r) for r in report.runs),
        "<h2>Notes</h2>",
        _notes(report),
    ]
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        f"<title>infer-top report: {escape(labels)}</title><style>{STYLE}</style></head>"
        f"<body>{''.join(body)}</body></html>\n"
    )
