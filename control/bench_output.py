"""What ``infer-top bench`` shows and writes beside the run: the live progress bar on
stderr, its outputs (JSONL, the store), and the --max-failure-pct judgement."""

from __future__ import annotations

import argparse
from collections.abc import Mapping

from rich.console import Console
from rich.progress import Progress, TaskID

from loadgen.profiles import LoadSpec
from loadgen.report import failure_lines, level_label, summary_table, token_lines
from loadgen.sinks import FanoutSink, JsonlSink
from runs.events import LevelFinished, LevelProgress, LevelStarted, RunEvent, RunResult, RunStarted
from runs.records import failures_by_kind, token_deviations
from runs.setup import RunSetup
from store import Store, open_store


class LiveBar:
    """Turns progress events into a rich progress bar (on stderr)."""

    def __init__(self, progress: Progress | None, spec: LoadSpec, console: Console) -> None:
        self.progress, self.spec, self.console = progress, spec, console
        self.task: TaskID | None = None
        self.setup: RunSetup | None = None
        """The run's setup as it started (its workload says how prompts were sized)."""

    def __call__(self, event: RunEvent) -> None:
        if isinstance(event, RunStarted):
            self.setup = event.setup
            for warning in event.warnings:
                self.console.print(f"[yellow]warning:[/] {warning}")
        if self.progress is None:
            return
        if isinstance(event, LevelStarted):
            label = (
                f"c={event.concurrency}"
                if event.request_rate is None
                else (f"{event.request_rate:g} req/s")
            )
            total = event.planned_requests if event.duration_s is None else event.duration_s
            self.task = self.progress.add_task(f"level {label}", total=total, info="")
        elif isinstance(event, LevelProgress) and self.task is not None:
            done = event.completed + event.failed + event.incomplete
            ttft = "n/a" if event.ttft_p50_s is None else f"{event.ttft_p50_s * 1000:.0f} ms"
            info = f"{event.output_tok_s:8.1f} tok/s  TTFT p50 {ttft}  errors {event.failed}"
            shown = done if self.spec.duration_s is None else event.elapsed_s
            self.progress.update(self.task, completed=shown, info=info)
        elif isinstance(event, LevelFinished) and self.task is not None:
            s = event.summary
            self.progress.update(
                self.task,
                completed=self.progress.tasks[-1].total,
                description=f"level {level_label(s)} done",
            )


def print_summary(result: RunResult, workload: Mapping[str, object]) -> None:
    """The run's table on stdout, then how its prompts were sized, requested vs
    engine-counted tokens per level, failures, and the warnings they give."""
    out = Console()
    if not out.is_terminal:  # piped to a file: do not squeeze the table into 80 columns
        out = Console(width=160)
    out.print(summary_table(result))
    lines = [*token_lines(result), *failure_lines(result)]
    if workload.get("sizing"):
        lines.insert(0, f"prompts: {workload['sizing']}")
    for line in lines:
        out.print(line, highlight=False, soft_wrap=True)
    for warning in [*result.warnings, *token_deviations(result.levels)]:
        out.print(f"[yellow]warning:[/] {warning}", highlight=False, soft_wrap=True)


def open_outputs(args: argparse.Namespace) -> tuple[FanoutSink, Store | None]:
    """The JSONL sink (when asked) and the store (with --save); nothing left open on error."""
    sink = FanoutSink(JsonlSink(args.jsonl_path)) if args.jsonl_path else FanoutSink()
    try:
        return sink, open_store(args.db) if args.save else None
    except BaseException:
        sink.close()
        raise


def too_many_failures(result: RunResult, max_pct: float) -> str | None:
    """Why the run fails ``--max-failure-pct`` (failed over completed + failed
    measured requests, every level together; cut ones are not failures), or None."""
    failed = sum(s.failed for s in result.levels)
    total = failed + sum(s.completed for s in result.levels)
    if not total or failed * 100 <= max_pct * total:
        return None
    return (
        f"{failed} of {total} requests failed ({failed / total:.1%}), more than "
        f"--max-failure-pct {max_pct:g}: {failures_by_kind(result.levels)}"
    )


def close_outputs(sink: FanoutSink, store: Store | None, err: Console) -> bool:
    """Close the outputs; False (said on stderr) when one lost data: a full disk, or
    store rows that could not be written (set aside in its rejected_rows table)."""
    closers = [("the outputs", sink.close)]
    if store is not None:
        closers.append(("the store", store.close))
    closed = True
    for what, close in closers:
        try:
            close()
        except Exception as exc:  # OSError, or the store's StoreWriteError
            err.print(f"[red]error:[/] closing {what}: {exc}")
            closed = False
    return closed
