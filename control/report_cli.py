"""``infer-top report RUN... -o report.html``: one self-contained HTML file to hand on.

The setup of every run, throughput and TTFT against concurrency as SVG charts (one line
per run), the per-level table with cost, the alerts raised while the runs ran and the
seed-style headline table; simulated numbers are marked.  ``--charts DIR`` also writes
the charts as SVG files for slides (``--png``: PNG too, drawn by a local Chromium).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import tempfile
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from control.chart_png import ChartPngError, find_browser, svg_to_png
from control.config import ConfigError, load_config
from control.report_data import build_report
from control.report_html import chart_files, render_html
from store import StoreError, default_db_path, open_store


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "report",
        help="write stored runs as one self-contained HTML report (charts, tables, cost)",
        description="One HTML file with no network fetches: each run's setup, output tok/s "
        "and TTFT against concurrency (one line per run), every level's figures with cost "
        "per million tokens and requests, alerts during the runs, and the headline table "
        "(output tok/s at 64 concurrent per engine). Prices come from the config's [cost] "
        "table or --price-per-hour / --kwh.",
    )
    p.add_argument("runs", nargs="+", metavar="RUN", help="run ids (a unique prefix is enough)")
    p.add_argument("-o", "--output", type=Path, required=True, help="the HTML file to write")
    p.add_argument("--charts", type=Path, default=None, metavar="DIR",
                   help="also write throughput.svg and ttft.svg here (for slides)")  # fmt: skip
    p.add_argument("--png", action="store_true",
                   help="with --charts: PNGs too, drawn by a local headless Chromium")  # fmt: skip
    p.add_argument("--price-per-hour", type=float, default=None,
                   help="one hourly price for every run's node (instead of [cost])")  # fmt: skip
    p.add_argument("--kwh", type=float, default=None, help="price per kWh of GPU energy")
    p.add_argument("--currency", default=None, help="currency name shown (default: config's)")
    p.add_argument("--config", type=Path, default=None, help="config file with [cost]")
    p.add_argument(
        "--db", type=Path, default=None, help=f"store file (default {default_db_path()})"
    )
    p.set_defaults(func=run)


def _write(path: Path, text: str) -> None:
    """Whole or not at all: a reader never opens half a report."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def run(args: argparse.Namespace) -> int:
    err = Console(stderr=True)
    if args.png and args.charts is None:
        err.print("infer-top report: --png goes with --charts DIR (where the files go)")
        return 2
    for name in ("price_per_hour", "kwh"):
        value = getattr(args, name)
        if value is not None and not value >= 0:
            err.print(f"infer-top report: --{name.replace('_', '-')} must be 0 or more")
            return 2
    try:
        configured = load_config(args.config).prices
        prices = dataclasses.replace(
            configured,
            flat_hourly=configured.flat_hourly
            if args.price_per_hour is None
            else args.price_per_hour,
            kwh=configured.kwh if args.kwh is None else args.kwh,
            currency=args.currency or configured.currency,
        )
        with open_store(args.db) as st:
            report = build_report(st, args.runs, prices)
        _write(args.output, render_html(report))
        if args.charts is not None:
            browser = find_browser() if args.png else None
            for name, svg in chart_files(report).items():
                _write(args.charts / name, svg)
                if browser:
                    svg_to_png(
                        args.charts / name, (args.charts / name).with_suffix(".png"), browser
                    )
    except (ConfigError, StoreError, ChartPngError) as exc:
        err.print(escape(f"infer-top report: {exc}"))
        return 2
    except OSError as exc:
        err.print(escape(f"infer-top report: {exc}; check the path and its permissions"))
        return 2
    err.print(
        escape(f"wrote {args.output}" + (f" and charts in {args.charts}" if args.charts else ""))
    )
    return 0
