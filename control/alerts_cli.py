"""``infer-top alerts``: the stored alerts, active and past, headless (``--since``,
``--run``, ``--json``).  The store is the one the TUI writes them to."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from alerts import Alert, value_text
from runs.units import duration_arg
from store import StoreError, default_db_path, open_store
from store.runs_formats import stdout_console


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "alerts",
        help="list stored alerts (active and past), as a table or JSON",
        description="Alerts the TUI raised (engine exited, node unreachable, GPU throttled, "
        "KV cache full...), newest first, from the store: --db, else $INFER_TOP_DB, else "
        "$XDG_DATA_HOME/infer-top/infer-top.db. Active ones are listed whatever --since says.",
    )
    p.add_argument(
        "--db", type=Path, default=None, help=f"store file (default {default_db_path()})"
    )
    p.add_argument(
        "--since",
        type=duration_arg,
        default=None,
        help="only alerts raised or cleared within this long (e.g. 30m, 2h, 7d); default all",
    )
    p.add_argument("--run", help="only alerts linked to this load run")
    p.add_argument("--limit", type=int, default=1000, help="at most this many (default 1000)")
    p.add_argument("--json", action="store_true", help="one JSON array (stable field names)")
    p.set_defaults(func=run)


def _table(alerts: list[Alert]) -> Table:
    table = Table("state", "severity", "alert", "node", "on", "value", "raised", "cleared", "run")
    for a in alerts:
        state = "ACTIVE" + (" (acked)" if a.acked_at else "") if a.active else "cleared"
        table.add_row(
            state,
            str(a.severity),
            escape(a.title),
            escape(a.node),
            escape(a.target or "node"),
            value_text(a),
            _when(a.raised_at),
            _when(a.cleared_at),
            escape(a.run_id or "-"),
        )
    return table


def _when(ts: float | None) -> str:
    return "-" if ts is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))


def run(args: argparse.Namespace) -> int:
    err = Console(stderr=True)
    since = None if args.since is None else time.time() - args.since
    try:
        with open_store(args.db) as st:
            found = st.list_alerts(since=since, run_id=args.run, limit=args.limit)
    except StoreError as exc:
        err.print(escape(f"infer-top alerts: {exc}"))
        return 2
    if args.json:
        json.dump([a.to_json() for a in found], sys.stdout, indent=2, sort_keys=True)
        sys.stdout.write("\n")
        return 0
    console = stdout_console()  # piped: as wide as the rows, not cut to 80 columns
    if not found:
        console.print("no alerts stored" + (" in that window" if since is not None else ""))
        return 0
    console.print(_table(found))
    for a in found:
        console.print(escape(f"{a.id}  {a.title} on {a.node}: {a.message}"))
    return 0
