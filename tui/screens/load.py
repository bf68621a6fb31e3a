"""Load test: pick an engine and a profile; watch throughput, latency, errors and
the target node's GPUs live; the run is saved to the store."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar

from rich.markup import escape
from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.widgets import Button, DataTable, Input, Label, ProgressBar, Select, Static

from control.config import config_path
from control.load_profiles import LoadProfile, all_profiles, save_profile
from control.load_view import (
    FEW,
    LOAD_LEVEL_COLUMNS,
    LevelRow,
    finished_levels,
    level_row,
    progress_row,
    started_row,
)
from control.loads import (
    LOAD_FROM,
    LoadRequest,
    context_refusal,
    parse_load_nodes,
    path_label,
    replica_targets,
    resolve_target,
    share_with,
    until_stopped,
)
from control.services import describe_error
from loadgen.report import level_label
from runs.events import LevelFinished, LevelProgress, LevelStarted, RunStarted
from runs.records import LevelSummary, failures_sampled, failures_text, token_deviations
from store import StoreWriteError
from store.recorder import RunRecorder
from telemetry import EngineTelemetry
from tui.charts import Chart, ChartData, Series
from tui.fasttable import Cell
from tui.messages import UNSAVED, LoadFinished, LoadProgress, RunsChanged
from tui.profile_form import ProfileEdit, ProfileForm
from tui.screens.base import BaseScreen
from tui.screens.shared import Confirm
from tui.widgets import add_fixed_columns, gpu_rows, sync_table

LOAD_GPU_COLUMNS = (
    ("#", 2),
    ("Util", 4),
    ("util history", 12),
    ("Mem", 4),
    ("Power", 5),
    ("Temp", 5),
)


class LoadScreen(BaseScreen):
    MODE = "load"
    AUTO_FOCUS = "#target"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("r", "run", "Run load test"),
        Binding("c", "cancel_run", "Cancel run"),
        Binding("e", "edit_profile", "Edit profile"),
    ]

    def body(self) -> ComposeResult:
        self._profiles = list(all_profiles(self.top.config.load_profiles))
        """Built in, from the config file, and those edited in this session."""
        with Horizontal(id="load-main"):
            with Vertical(id="load-left"):
                with Horizontal(classes="row"):
                    yield Label("Target ")
                    yield Select[str]([], id="target", prompt="healthy engine", compact=True)
                    yield Label(" Profile ")
                    yield Select[str](
                        [(p.name, p.name) for p in self._profiles],
                        id="profile",
                        value=self._profiles[0].name,
                        allow_blank=False,
                        compact=True,
                    )
                    yield Button("Run (r)", id="run", variant="primary", compact=True)
                with Horizontal(classes="row", id="load-source"):
                    yield Label("Load ")
                    yield Select[str](
                        list(LOAD_FROM),
                        id="load-from",
                        value=LOAD_FROM[0][1],
                        allow_blank=False,
                        compact=True,
                    )
                    yield Label(" or split over ")
                    yield Input(placeholder="nodes a,b", id="load-nodes", compact=True)
                yield Static("Pick a target engine and a profile, then press r.", id="load-status")
                yield Static("", id="load-path")
                yield ProgressBar(total=1.0, id="load-progress", show_eta=False)
                yield Static(
                    f"Levels (latencies in ms; {FEW}: too few requests for that percentile)",
                    classes="section",
                )
                table: DataTable[Cell] = DataTable(id="load-levels", cursor_type="row")
                add_fixed_columns(table, LOAD_LEVEL_COLUMNS)
                yield table
                yield Static("", id="load-failures")
                yield Chart(id="load-tps")
            with Vertical(id="load-right"):
                yield Static("Target node GPUs", classes="section", id="load-gpu-title")
                gpus: DataTable[Cell] = DataTable(id="load-gpus", cursor_type="row")
                add_fixed_columns(gpus, LOAD_GPU_COLUMNS)
                yield gpus
        self.target_keys: list[str] = []
        """The healthy engines (node/engine) the target list offers."""
        self._lost: str | None = None
        """The target that left the list (its engine stopped): none is picked in its place."""
        self._tps: list[tuple[float, float]] = []
        self._levels: dict[str, LevelRow] = {}
        self._failures: dict[int, list[str]] = {}
        """Each finished level's failure kinds with the engine's own words."""
        self._summaries: list[LevelSummary] = []
        self._planned = 1
        self._load_running = False
        self.running_target: str | None = None
        """The engine (node/engine) a load test runs against now, else None."""
        self._recorder: RunRecorder | None = None
        self._stop_reason: str | None = None
        """Why the operator stopped the running load test (its levels so far are kept)."""
        self._stop = asyncio.Event()
        """Set to stop the running load test now."""
        self._after_stop: Callable[[], object] | None = None

    def on_mount(self) -> None:
        self.refresh_fleet()

    def _targets(self) -> dict[str, tuple[str, EngineTelemetry, str]]:
        """The healthy engines with a URL, by node/engine: (node, engine, its URL); and
        each Swarm service healthy on several nodes (``replicas/ID``: its first replica)."""
        targets = {
            f"{node}/{e.id}": (node, e, e.url)
            for node, e in self.top.model.engines()
            if e.url and e.health == "healthy"
        }
        for key, nodes in self._replicas().items():
            targets[key] = targets[f"{nodes[0]}/{key.split('/', 1)[1]}"]
        return targets

    def _replicas(self) -> dict[str, tuple[str, ...]]:
        """The targets that load every replica of a Swarm service: the nodes running one."""
        return replica_targets(self.top.model.engines())

    @staticmethod
    def _label(key: str, engine: EngineTelemetry, replicas: dict[str, tuple[str, ...]]) -> str:
        # kind first: a narrow select cuts the end, not what the engine is
        kind = f"{engine.kind}{' SIM' if engine.simulated else ''}"
        nodes = replicas.get(key)
        if nodes is None:
            return f"{kind} · {key}"
        return f"{kind} · all replicas of {engine.id} ({', '.join(nodes)})"

    def refresh_fleet(self) -> None:
        targets = self._targets()
        select = self.query_one("#target", Select)
        if not select.is_mounted:  # its option list is composed when it mounts
            self.call_after_refresh(self.refresh_fleet)
            return
        keys = sorted(targets)
        if self.target_keys != keys:
            current = select.value
            self.target_keys = keys
            replicas = self._replicas()  # once for all the options, not once per option
            select.set_options(
                [(self._label(k, e, replicas), k) for k, (_, e, _) in sorted(targets.items())]
            )
            if current in keys:
                select.value = current
            elif isinstance(current, str):  # never another engine in its place, silently
                self._target_lost(current)
            elif keys and self._lost is None:
                # useful at once: the first healthy engine, its node's GPUs beside
                select.value = keys[0]
        value = select.value
        node_name = targets[value][0] if isinstance(value, str) and value in targets else None
        node = self.top.model.nodes.get(node_name or "")
        self.query_one("#load-gpu-title", Static).update(
            f"GPUs of {node_name}" if node_name else "Target node GPUs"
        )
        rows = [
            (key, (c[1], c[3], c[4], c[6], c[7], c[9]))
            for key, c in gpu_rows([node] if node else [])
        ]
        sync_table(self.query_one("#load-gpus", DataTable), rows)

    def _target_lost(self, key: str) -> None:
        self._lost = key
        said = (
            f"target {key} is gone: its engine stopped or is no longer healthy; pick another target"
        )
        if not self._load_running:
            self.query_one("#load-status", Static).update(f"[yellow]{escape(said)}[/]")
        self.notify(said, severity="warning")

    def on_select_changed(self, event: Select.Changed) -> None:
        if event.select.id == "target":
            if isinstance(event.value, str):
                self._lost = None  # the operator's own pick
            self.refresh_fleet()
        elif event.select.id == "profile" and not self._load_running:
            self.query_one("#load-status", Static).update(self._profile().description)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "run":
            self.action_run()

    def action_run(self) -> None:
        if self._load_running:
            self.notify("a load test is already running", severity="warning")
            return
        value = self.query_one("#target", Select).value
        targets = self._targets()
        if not isinstance(value, str) or value not in targets:
            self.notify("pick a healthy target engine first", severity="warning")
            return
        node, engine, url = targets[value]
        prof = self._profile()
        chosen = self.query_one("#load-from", Select).value
        load_from = next((v for _, v in LOAD_FROM if v == chosen), LOAD_FROM[0][1])
        try:
            typed = self.query_one("#load-nodes", Input).value
            load_nodes = parse_load_nodes(typed, self.top.model.nodes)
        except ValueError as exc:
            self.notify(str(exc), severity="warning")
            return
        replicas = self._replicas().get(value, ())
        if replicas and load_nodes:
            said = "a run over all replicas is split over their nodes: clear 'split over'"
            self.notify(said, severity="warning")
            return
        request = LoadRequest(
            node=node,
            engine_id=engine.id,
            engine_kind=engine.kind,
            url=url,
            model=engine.id,
            profile=prof,
            simulated=engine.simulated,
            load_from=load_from,
            load_nodes=replicas or load_nodes,
            replicas=bool(replicas),
        )
        self._load_running = True
        self.running_target, self._stop_reason = value, None
        self._stop = asyncio.Event()
        self._tps.clear()
        self._levels.clear()
        self._failures.clear()
        self.query_one("#load-progress", ProgressBar).update(progress=0)  # this run's own
        self.query_one("#load-failures", Static).display = False
        self._summaries.clear()
        self._planned = prof.level_count
        sync_table(self.query_one("#load-levels", DataTable), [])
        where = next(label for label, v in LOAD_FROM if v == load_from)
        where = f"split over {', '.join(load_nodes)}" if load_nodes else where
        where = "each replica's node loading its own" if replicas else where
        self.query_one("#load-status", Static).update(
            f"starting {prof.description} on {value}, {where}"
        )
        self._run(request)

    def _profile(self) -> LoadProfile:
        chosen = self.query_one("#profile", Select).value
        return next((p for p in self._profiles if p.name == chosen), self._profiles[0])

    def action_edit_profile(self) -> None:
        """The picked profile in a form: used for the next run, or saved by name."""
        path = self.top.config.source or config_path()

        def done(edit: ProfileEdit | None) -> None:
            if edit is None:
                return
            named = {p.name: i for i, p in enumerate(self._profiles)}
            if edit.profile.name in named:
                self._profiles[named[edit.profile.name]] = edit.profile
            else:
                self._profiles.append(edit.profile)
            select = self.query_one("#profile", Select)
            select.set_options([(p.name, p.name) for p in self._profiles])
            select.value = edit.profile.name
            self.query_one("#load-status", Static).update(edit.profile.description)
            if edit.save:
                self._save_profile(path, edit.profile)

        self.app.push_screen(ProfileForm(self._profile(), str(path)), done)

    @work(group="profile-save", exit_on_error=False)
    async def _save_profile(self, path: Path, prof: LoadProfile) -> None:
        try:
            await asyncio.to_thread(save_profile, path, prof)
        except Exception as exc:  # the file's problem in words; the profile stays offered
            self.notify(f"profile {prof.name} not saved: {describe_error(exc)}", severity="error")
            return
        self.notify(f"profile {prof.name} saved in {path}")

    @work(exclusive=True, group="load", exit_on_error=False)
    async def _run(self, request: LoadRequest) -> None:
        services = self.top.services
        if services.load_runner is None:
            self.post_message(LoadFinished(None, "no load generator is configured", None))
            return
        request = await resolve_target(services.node(request.node), request)
        refused = await context_refusal(request)
        if refused is not None:  # nothing sent, nothing saved
            self.post_message(LoadFinished(None, refused, None))
            return
        if self._stop_reason is not None:  # cancelled while its target was resolved
            self.post_message(LoadFinished(None, None, None))
            return
        request = share_with(request, services.node)  # a distributed run's links
        recorder = RunRecorder(services.store)  # gets every event, requests included
        self._recorder = recorder
        self.top.record_telemetry(request.node, True)
        try:
            events = services.load_runner(request, recorder)
            # a stop closes the events at once: the run's cut requests and its end still
            # reach the recorder, which keeps the levels it finished
            async with contextlib.aclosing(events):
                async for event in until_stopped(events, self._stop):
                    self.top.observe_run(request.node, request.engine_id, event)
                    self.post_message(LoadProgress(event))
            recorder.abandon("the load test ended without a result")
        except Exception as exc:
            recorder.abandon(describe_error(exc))
        finally:
            self.top.record_telemetry(request.node, False)
        if services.store is not None:
            try:
                await asyncio.to_thread(services.store.flush)
            except StoreWriteError as exc:  # a full disk: the run is not all in the store
                self.post_message(LoadFinished(recorder.run_id, str(exc), UNSAVED))
                return
        self.post_message(LoadFinished(recorder.run_id, recorder.reason, recorder.status))

    def action_cancel_run(self) -> None:
        if not self._load_running or self.running_target is None:
            self.notify("no load test is running", severity="warning")
            return

        def done(confirmed: bool | None) -> None:
            if confirmed:
                self.stop_run("cancelled by the operator in the TUI")

        question = (
            f"Cancel the load test on {self.running_target}? Its finished levels and "
            "requests stay saved; the run is kept as interrupted."
        )
        self.app.push_screen(Confirm(question, "Cancel run", "Keep running"), done)

    def stop_run(self, reason: str, then: Callable[[], object] | None = None) -> None:
        """Stop the running load test (at its next event, within a progress tick);
        ``then`` runs once it is stopped and saved (the app's exit after a quit)."""
        if not self._load_running:
            if then is not None:
                then()
            return
        self._stop_reason, self._after_stop = reason, then
        if self._recorder is not None:
            self._recorder.stopping(reason)
        self._stop.set()
        self.query_one("#load-status", Static).update(f"stopping the load test: {reason}")

    def on_load_progress(self, message: LoadProgress) -> None:
        event = message.event
        status = self.query_one("#load-status", Static)
        if isinstance(event, LevelStarted):
            self._levels[str(event.level_index)] = started_row(event)
        elif isinstance(event, LevelProgress):
            level = self._levels.get(str(event.level_index), ("", ("?",)))[1][0]
            self._levels[str(event.level_index)] = progress_row(event, level)
            self._tps.append((event.elapsed_s + 1000 * event.level_index, event.output_tok_s))
            errors = failures_text(event.errors_by_kind) or "none"
            status.update(
                f"level {event.level_index + 1}/{self._planned}: "
                f"{event.in_flight} in flight, {event.completed} done, "
                f"{event.failed} failed (errors: {errors}), "
                f"{event.output_tok_s:,.0f} out tok/s"
            )
        elif isinstance(event, LevelFinished):
            self._summaries.append(event.summary)
            row = level_row(event.summary)
            self._levels[row[0]] = row
            self._show_failures(event.summary)
            self.query_one("#load-progress", ProgressBar).update(
                progress=self._finished() / self._planned
            )
        elif isinstance(event, RunStarted):
            self.query_one("#load-path", Static).update(path_label(event.setup))
            if event.warnings:
                status.update("warning: " + "; ".join(event.warnings))
        sync_table(
            self.query_one("#load-levels", DataTable),
            [self._levels[k] for k in sorted(self._levels, key=int)],
        )
        self._draw_tps()

    def _finished(self) -> int:
        return finished_levels(cells for _, cells in self._levels.values())

    def _show_failures(self, summary: LevelSummary) -> None:
        """Under the table: each level's failure kinds with a sample of the engine's
        own message (plain text: the engine's words may hold markup brackets)."""
        label = level_label(summary)
        lines = failures_sampled(summary.failures_by_kind, summary.failure_samples)
        if not lines:
            return
        self._failures[summary.level_index] = [f"{label} failed: {line}" for line in lines]
        text = "\n".join(line for _, kinds in sorted(self._failures.items()) for line in kinds)
        failures = self.query_one("#load-failures", Static)
        failures.update(Text(text, style="red"))
        failures.display = True

    def _draw_tps(self) -> None:
        series = (
            (Series(None, tuple(range(len(self._tps))), tuple(v for _, v in self._tps)),)
            if self._tps
            else ()
        )
        self.query_one("#load-tps", Chart).show(ChartData("output tok/s during the run", series))

    def on_load_finished(self, message: LoadFinished) -> None:
        """Say how the run was stored (the recorder's word, not what was asked of it)."""
        self._load_running, self.running_target, self._recorder = False, None, None
        status = self.query_one("#load-status", Static)
        saved = f" (run {message.run_id} saved)" if message.run_id else ""
        if message.status is None and message.error is None:
            status.update(f"[yellow]load test {self._stop_reason}: nothing was saved[/]")
        elif message.status == UNSAVED:
            status.update(
                f"[bold red]load test ended, but run {message.run_id} is only partly in the "
                f"store: {escape(message.error or '')}[/]"
            )
        elif message.status == "interrupted":
            kept = self._finished()
            status.update(
                f"[yellow]load test stopped, {escape(message.error or 'interrupted')}: run "
                f"{message.run_id} saved as interrupted with its {kept} finished level(s)[/]"
            )
        elif message.status is None:
            status.update(f"[bold red]load test not started: {escape(message.error or '')}[/]")
        elif message.status != "completed":
            status.update(f"[bold red]load test failed: {escape(message.error or '')}[/]{saved}")
        else:
            self.query_one("#load-progress", ProgressBar).update(progress=1.0)
            status.update(
                f"[green]run {message.run_id} finished and saved[/] — "
                "press 5 to compare, 6 for history"
                + "".join(
                    f"\n[yellow]warning:[/] {escape(w)}" for w in token_deviations(self._summaries)
                )
            )
        self.app.post_message(RunsChanged())
        after, self._after_stop = self._after_stop, None
        if after is not None:
            after()
