"""``infer-top compare --baseline RUN RUN``: did a run regress against its baseline?

Headless, for CI: level by level, every throughput and latency metric's change with a
bootstrap judgement from the per-request records (``control.regression``); exit 1 when a
regression is found, 2 when the runs cannot be compared, 0 otherwise.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from control.regression import DEFAULT_THRESHOLD, RegressionCheck, check_regression
from control.regression_view import findings, regression_table
from store import StoreError, default_db_path, open_store

EXIT_REGRESSION = 1
EXIT_UNUSABLE = 2


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "compare",
        help="check a run against a baseline run for regressions (exit 1 on one)",
        description="Compare RUN with --baseline level by level: output tok/s, TTFT, TPOT "
        "and E2E percentiles and failure rate, each change judged against noise by a "
        "bootstrap over the runs' per-request records. A regression is a change to the "
        "worse beyond --threshold whose 95 %% confidence interval lies wholly on the worse "
        "side; a p99 is judged only from 500 requests a level (five beyond it). Exit 0: none; "
        "1: regression; 2: the runs cannot be compared.",
    )
    p.add_argument("run", metavar="RUN", help="the run to check (a unique id prefix is enough)")
    p.add_argument("--baseline", required=True, metavar="RUN", help="the run to compare with")
    p.add_argument(
        "--threshold",
        type=float,
        default=DEFAULT_THRESHOLD,
        help="smallest change that counts: a fraction (0.10 = 10 %%), in points for the "
        f"failure rate (default {DEFAULT_THRESHOLD:g})",
    )
    p.add_argument(
        "--any-config",
        action="store_true",
        help="compare even when the runs' engine, profile or workload differ",
    )
    p.add_argument("--json", action="store_true", help="the verdict as JSON on stdout")
    p.add_argument(
        "--db", type=Path, default=None, help=f"store file (default {default_db_path()})"
    )
    p.set_defaults(func=run)


def _table(check: RegressionCheck) -> Table:
    view = regression_table(check)
    t = Table(title=view.title, title_justify="left")
    for col in view.columns:
        t.add_column(col, justify="left" if col in ("level", "metric", "verdict") else "right")
    for _, cells in view.rows:
        t.add_row(*(escape(c) for c in cells), style="red" if cells[-1] == "REGRESSION" else None)
    return t


def _as_json(check: RegressionCheck) -> str:
    return json.dumps(
        {
            "baseline": check.base.run_id,
            "run": check.new.run_id,
            "threshold": check.threshold,
            "regressed": check.regressed,
            "config_differences": list(check.config_differences),
            "unmatched_levels": list(check.unmatched),
            "levels": [
                {
                    "level": lv.level,
                    "changes": [{**asdict(c), "significant": c.significant} for c in lv.changes],
                }
                for lv in check.levels
            ],
        },
        indent=2,
    )


def run(args: argparse.Namespace) -> int:
    console, err = Console(), Console(stderr=True)
    if not 0 < args.threshold < 10:
        err.print(f"infer-top compare: --threshold {args.threshold} must be a fraction such as 0.1")
        return EXIT_UNUSABLE
    try:
        with open_store(args.db) as st:
            check = check_regression(
                st, args.baseline, args.run, threshold=args.threshold, any_config=args.any_config
            )
    except (StoreError, ValueError) as exc:
        err.print(escape(f"infer-top compare: {exc}"))
        return EXIT_UNUSABLE
    except OSError as exc:
        err.print(escape(f"infer-top compare: {exc}; check the store's path and permissions"))
        return EXIT_UNUSABLE
    if not check.levels:
        err.print(
            escape(
                f"infer-top compare: runs {check.base.run_id} and {check.new.run_id} share no "
                "load level (same concurrency or rate): nothing to compare"
            )
        )
        return EXIT_UNUSABLE
    if args.json:
        print(_as_json(check))
    else:
        console.print(_table(check))
        for line in findings(check):
            console.print(escape(line), style="red" if line.startswith("regression") else None)
    return EXIT_REGRESSION if check.regressed else 0
