"""``infer-top runs``: list, show, compare, export, delete stored runs; vacuum, prune."""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import IO

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from runs.records import token_deviations
from runs.units import duration_arg
from store.errors import StoreError
from store.export import (
    comparison_to_csv,
    comparison_to_json,
    comparison_to_markdown,
    requests_to_jsonl,
)
from store.models import Comparison, RunInfo
from store.runs_formats import levels_tsv, run_json, runs_json, runs_tsv, stdout_console
from store.store import Store, default_db_path, open_store


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    help_db = f"store file (default {default_db_path()})"
    p = sub.add_parser(
        "runs",
        help="list, show, compare and export stored load-test runs",
        description="Stored load-test runs. The store is one SQLite file: --db, else "
        "$INFER_TOP_DB, else $XDG_DATA_HOME/infer-top/infer-top.db.",
    )
    p.add_argument("--db", type=Path, default=None, help=help_db)
    p.set_defaults(func=run, runs_command=None, json=False, tsv=False)
    # --db after the action too (`runs list --db X`); SUPPRESS keeps one given before it.
    db_after = argparse.ArgumentParser(add_help=False)
    db_after.add_argument("--db", type=Path, default=argparse.SUPPRESS, help=help_db)
    rs = p.add_subparsers(dest="runs_command", metavar="ACTION")

    def action(name: str, help: str) -> argparse.ArgumentParser:
        return rs.add_parser(name, help=help, parents=[db_after])

    def formats(parser: argparse.ArgumentParser, what: str) -> None:
        out = parser.add_mutually_exclusive_group()
        out.add_argument("--json", action="store_true", help=f"{what} as JSON")
        out.add_argument(
            "--tsv", action="store_true", help=f"{what} as tab-separated values, a header first"
        )

    ls = action("list", "runs, newest first")
    ls.add_argument("--engine", help="only this engine kind")
    ls.add_argument("--node", help="only runs on this node")
    ls.add_argument("--status", help="running | completed | interrupted | failed")
    ls.add_argument("--limit", type=int, default=50)
    formats(ls, "the runs")

    show = action("show", "one run: its settings and every load level")
    show.add_argument("run", help="run id (a unique prefix is enough)")
    formats(show, "the run (TSV: its load levels)")

    cmp_ = action("compare", "runs side by side, level by level")
    cmp_.add_argument("runs", nargs="+", metavar="RUN")
    cmp_.add_argument(
        "--threshold",
        type=float,
        default=0.05,
        help="with two runs of one configuration, list metrics that got worse by more "
        "than this fraction (default 0.05)",
    )

    ex = action("export", "write a comparison (csv, json, md) or requests (jsonl)")
    ex.add_argument("runs", nargs="+", metavar="RUN")
    ex.add_argument("--format", choices=("csv", "json", "md", "jsonl"), default="md")
    ex.add_argument("-o", "--output", type=Path, default=None, help="file (default: stdout)")
    ex.add_argument("--detailed", action="store_true", help="md: add latency and energy columns")

    rm = action("delete", "delete a run with its levels and requests")
    rm.add_argument("run")

    action("vacuum", "compact the store file (VACUUM)")

    pr = action("prune", "delete old telemetry taken outside runs")
    pr.add_argument("--older-than", type=duration_arg, default="7d")


def _when(ts: float | None) -> str:
    if ts is None:
        return "-"
    return dt.datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M:%S")


def _num(value: float | None, fmt: str = ",.1f", scale: float = 1.0) -> str:
    return "n/a" if value is None else format(value * scale, fmt)


def _runs_table(runs: list[RunInfo]) -> Table:
    t = Table(title="runs", title_justify="left")
    for col in ("id", "name", "engine", "node", "status", "levels", "requests", "created"):
        t.add_column(
            col, justify="right" if col in {"levels", "requests"} else "left", no_wrap=col == "id"
        )
    for r in runs:
        name = (r.name or "") + (" (simulated)" if r.simulated else "")
        t.add_row(
            escape(r.run_id),
            escape(name),
            escape(r.engine_kind or "-"),
            escape(r.node or "-"),
            escape(_status(r)),
            str(r.level_count),
            f"{r.request_count:,}",
            _when(r.created_at),
        )
    return t


def _status(run: RunInfo) -> str:
    return f"{run.status}: {run.status_reason}" if run.status_reason else run.status


def _comparison_table(c: Comparison) -> Table:
    t = Table(title="comparison", title_justify="left")
    cols = ["run", "level", "out tok/s", "req/s", "TTFT p50 ms", "TTFT p99 ms", "TPOT p50 ms"]
    cols += ["failed", "GPU util %", "power W", "J/token", "tok/J"]
    for col in cols:
        t.add_column(col, justify="left" if col == "run" else "right")
    for r in c.rows:
        level = f"c={r.concurrency}" if r.concurrency is not None else f"{r.request_rate:g} req/s"
        t.add_row(
            escape(f"{r.label} [{r.run_id}]"),
            level,
            _num(r.output_tok_s),
            _num(r.request_s, ",.2f"),
            _num(r.ttft_p50_s, scale=1000),
            _num(r.ttft_p99_s, scale=1000),
            _num(r.tpot_p50_s, ",.2f", 1000),
            f"{r.failure_rate:.1%}",
            _num(r.mean_gpu_util_pct),
            _num(r.mean_power_w),
            _num(r.j_per_token, ".3f"),
            _num(r.tok_per_j, ".3f"),
        )
    return t


def _show(console: Console, st: Store, args: argparse.Namespace) -> None:
    r = st.get_run(args.run)
    comparison = st.compare([r.run_id])
    alerts = st.list_alerts(run_id=r.run_id)
    warnings = token_deviations(lv.summary for lv in st.levels(r.run_id))
    if args.json or args.tsv:
        text = run_json(r, comparison, alerts, warnings) if args.json else levels_tsv(comparison)
        sys.stdout.write(text)
        return
    console.print(
        f"[bold]{escape(r.label)}[/bold]  id {escape(r.run_id)}  status {escape(_status(r))}"
    )
    console.print(
        escape(f"engine {r.engine_kind or '-'} on {r.node or '-'}, deployment {r.deployment_id}")
    )
    console.print(
        f"created {_when(r.created_at)}, finished {_when(r.finished_at)}, "
        f"{r.request_count:,} requests stored"
    )
    for name, value in (("profile", r.profile), ("workload", r.workload)):
        console.print(escape(f"{name}: {value}"))
    console.print(escape(f"software: {r.software_versions}"))
    if r.simulated:
        console.print("[yellow]simulated engine: figures are not measurements of real hardware")
    for alert in alerts:
        cleared = "active" if alert.cleared_at is None else f"cleared {_when(alert.cleared_at)}"
        console.print(
            escape(
                f"alert {alert.id}: {alert.title} on {alert.node}, raised "
                f"{_when(alert.raised_at)}, {cleared}: {alert.message}"
            )
        )
    console.print(_comparison_table(comparison))
    for warning in warnings:
        console.print(f"[yellow]warning:[/] {escape(warning)}")


def _compare(console: Console, st: Store, args: argparse.Namespace) -> None:
    c = st.compare(args.runs)
    console.print(_comparison_table(c))
    for warning in c.warnings:
        console.print(f"[yellow]warning:[/] {escape(warning)}")
    if len(c.runs) == 2:
        base, new = c.runs
        try:
            found = st.regressions(base.run_id, new.run_id, args.threshold)
        except StoreError as exc:
            console.print(f"[dim]no regression check: {escape(str(exc))}")
            return
        if not found:
            console.print(f"no metric got worse by more than {args.threshold:.0%}")
        for g in found:
            level = f"c={g.concurrency}" if g.concurrency is not None else f"{g.request_rate} req/s"
            console.print(
                f"[red]regression[/red] {level} {g.metric}: {g.base:.4g} -> {g.new:.4g} "
                f"({g.change:+.1%})"
            )


def _export(st: Store, args: argparse.Namespace, out: IO[str]) -> None:
    if args.format == "jsonl":
        for rid in args.runs:
            requests_to_jsonl(st.iter_requests(rid), out)
        return
    c = st.compare(args.runs)
    writers: dict[str, Callable[[Comparison], str]] = {
        "csv": comparison_to_csv,
        "json": comparison_to_json,
        "md": lambda comp: comparison_to_markdown(comp, detailed=args.detailed),
    }
    out.write(writers[args.format](c))


def run(args: argparse.Namespace) -> int:
    console = stdout_console()
    err = Console(stderr=True)
    if args.runs_command is None:
        args.runs_command, args.engine, args.node, args.status, args.limit = (
            "list",
            None,
            None,
            None,
            50,
        )
    try:
        with ExitStack() as stack:
            st = stack.enter_context(open_store(args.db))
            cmd = args.runs_command
            if cmd == "list":
                runs = st.list_runs(
                    engine_kind=args.engine, node=args.node, status=args.status, limit=args.limit
                )
                if args.json or args.tsv:
                    sys.stdout.write(runs_json(runs) if args.json else runs_tsv(runs))
                elif not runs:
                    console.print(
                        escape(f"no runs stored in {st.path}; `infer-top bench ...` makes one")
                    )
                else:
                    console.print(_runs_table(runs))
            elif cmd == "show":
                _show(console, st, args)
            elif cmd == "compare":
                _compare(console, st, args)
            elif cmd == "export":
                if args.output is None:
                    _export(st, args, sys.stdout)
                else:
                    with args.output.open("w", encoding="utf-8") as fh:
                        _export(st, args, fh)
                    err.print(escape(f"wrote {args.output}"))
            elif cmd == "delete":
                n = st.delete_run(args.run)
                console.print(escape(f"deleted run {args.run} and its {n:,} requests"))
            elif cmd == "vacuum":
                before, after = st.vacuum()
                console.print(escape(f"vacuumed {st.path}: {before:,} -> {after:,} bytes"))
            elif cmd == "prune":
                res = st.prune_telemetry(args.older_than)
                console.print(
                    f"pruned {res.gpu_samples_deleted:,} GPU and {res.engine_samples_deleted:,} "
                    "engine samples outside runs"
                )
    except StoreError as exc:
        err.print(escape(f"infer-top runs: {exc}"))
        return 2
    except OSError as exc:
        err.print(escape(f"infer-top runs: {exc}; check the path and its permissions"))
        return 2
    return 0
