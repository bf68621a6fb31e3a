"""The infer-top Textual app and its one factory, shared by the CLI and the tests."""

from __future__ import annotations

import asyncio
import gc
import threading
from collections import Counter
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import ClassVar

from textual.app import App
from textual.binding import Binding, BindingType
from textual.timer import Timer
from textual.widgets import DataTable, SelectionList

from control.alerts import AlertCenter
from control.config import Config, NodeConfig, config_path
from control.model import FleetModel
from control.nodes import NodeHandle
from control.services import Report, Services, describe_error
from control.ssh_tunnel import SshTunnel, TunnelState
from control.wiring import join_node
from runs.events import RunEvent
from store import StoreWriteError
from telemetry import TelemetryFrame
from tui import guard
from tui.fasttable import FastTable
from tui.keys import bindings_of, typed_actions, typing
from tui.messages import FleetChanged, RunsChanged, StartupProgress
from tui.palette import ScreenCommands
from tui.screens.alerts import AlertsScreen
from tui.screens.base import ALERTS_KEY, TABS, BaseScreen
from tui.screens.compare import CompareScreen
from tui.screens.engine import EngineScreen
from tui.screens.fleet import FleetScreen
from tui.screens.help import HelpScreen, help_sections
from tui.screens.history import HistoryScreen
from tui.screens.load import LoadScreen
from tui.screens.node import NodeScreen
from tui.screens.shared import Confirm, RunsScreen

SCREENS_BY_MODE: dict[str, type[BaseScreen]] = {
    "fleet": FleetScreen,
    "node": NodeScreen,
    "engines": EngineScreen,
    "load": LoadScreen,
    "compare": CompareScreen,
    "history": HistoryScreen,
    "alerts": AlertsScreen,
}
"""The app's modes (its 1-6 screens and the alerts on !); each screen is built with the
app as its host."""

NODE_CHECK_S = 1.0
"""How often the node rule looks at every node's newest frame age."""
GC_FREEZE_AFTER_S = 10.0
"""Once started (Textual, the screens, every node's state), the heap is frozen out of
Python's full collections (``gc.freeze``): at 256 nodes each redraw allocates thousands of
rows, and every full collection then walked the whole start-up heap again (about 60 ms
per redraw at 256 x 8). Frozen objects are still freed by reference counting."""


def freeze_heap() -> None:
    """Collect what is garbage now (frozen, it would never be), then freeze the rest."""
    gc.collect()
    gc.freeze()


RedrawListener = Callable[[list[float], float], None]


class InferTopApp(App[int]):
    TITLE = "infer-top"
    CSS_PATH = "infer_top.tcss"
    COMMANDS = App.COMMANDS | {ScreenCommands}
    BINDINGS: ClassVar[list[BindingType]] = [
        *(
            Binding(key, f"switch_mode('{mode}')", title, key_display=key)
            for key, mode, title in TABS
        ),
        Binding(
            "exclamation_mark",
            "switch_mode('alerts')",
            "Alerts",
            key_display=ALERTS_KEY,
            show=False,
        ),
        Binding("question_mark", "help", "Help", key_display="?"),
        Binding("q", "quit", "Quit"),
        Binding("colon", "command_palette", "Commands", key_display=":", show=False),
    ]

    def __init__(self, config: Config, services: Services) -> None:
        super().__init__()
        guard.install()  # a widget that fails to draw says why in its place; the app goes on
        self.config = config
        self.services = services
        self.model = FleetModel(
            (n.name, f"{n.url} (ssh {n.tunnel.destination})" if n.tunnel else n.url)
            for n in services.nodes
        )
        self.alerts = AlertCenter(config.alerts, store=services.store, clock=services.clock)
        self.selected_node: str | None = services.nodes[0].name if services.nodes else None
        self._fleet_pending = False
        self._last_refresh = 0.0
        self._refresh_timer: Timer | None = None
        self._arrivals: list[float] = []
        self._recording: Counter[str] = Counter()
        self.store_problem: str | None = None
        """The store's last write failure while rows wait to be written: every screen
        shows it (the writer only logs it, and a log is not where an operator looks)."""
        self._store_listener: Callable[[StoreWriteError], None] | None = None
        for mode, screen in SCREENS_BY_MODE.items():
            # the screen gets the app as its ScreenHost: no screen imports this module
            self.add_mode(mode, partial(screen, self))
        self.redraw_listeners: list[RedrawListener] = []
        """Called with (frame arrival times, shown at) in loop time after each redraw
        is on screen: the benchmark's lag probe."""
        if services.load_runner is not None:
            # The load generator's spawned process needs multiprocessing's resource
            # tracker, which passes on sys.stderr's fd: start it now, while stderr is
            # still the terminal (inside the app it is Textual's capture, fd -1).
            from multiprocessing import resource_tracker

            resource_tracker.ensure_running()

    # -- start-up -------------------------------------------------------------

    async def on_mount(self) -> None:
        loop = asyncio.get_running_loop()

        def store_error(error: StoreWriteError) -> None:
            # on the store writer's thread: never block it (call_from_thread would wait)
            loop.call_soon_threadsafe(self._store_failed, str(error))

        self._store_listener = store_error
        self.services.store_error_listeners.append(store_error)
        await self.switch_mode("fleet")
        self.set_interval(NODE_CHECK_S, self.check_nodes)
        for node in self.services.nodes:
            self._watch(node)
        if self.services.on_start is not None:
            self.run_worker(
                self._startup(self.services.on_start), name="startup", exit_on_error=False
            )
        self._notify_fleet()
        self.set_timer(GC_FREEZE_AFTER_S, freeze_heap)

    def _watch(self, node: NodeHandle) -> None:
        """Show the node's link and follow its telemetry (or say why there is none)."""
        if node.tunnel is not None:
            node.tunnel.subscribe(partial(self._tunnel_changed, node.name, node.tunnel))
        if node.client is None:
            self.model.mark_error(node.name, node.error or "no client", None)
        elif self.services.stream_telemetry:
            self.run_worker(
                self._follow_node(node),
                name=f"telemetry:{node.name}",
                group="telemetry",
                exit_on_error=False,
            )

    @property
    def config_file(self) -> Path:
        return self.config.source or config_path()

    def join_node(self, node: NodeConfig) -> bool:
        """A node ``node add`` just put in the config joins the fleet now; False where one
        of that name is shown already (upgraded in place, its link unchanged)."""
        handle = join_node(self.services, node)
        if handle is None:
            return False
        self.model.add_node(node.name, f"{handle.url} (ssh {node.ssh})" if node.ssh else node.url)
        self._watch(handle)
        self._notify_fleet()
        return True

    async def _startup(self, work: Callable[[Report], Awaitable[None]]) -> None:
        loop_thread = threading.get_ident()

        def report(text: str, fraction: float | None, done: bool = False) -> None:
            message = StartupProgress(text, fraction, done)
            if threading.get_ident() == loop_thread:
                self.post_message(message)
            else:  # start-up work may run in a thread (asyncio.to_thread)
                self.call_from_thread(self.post_message, message)

        try:
            await work(report)
        except Exception as exc:  # shown, never fatal: the live screens still work
            report(f"start-up work failed: {describe_error(exc)}", None, True)
            self.notify(f"start-up work failed: {describe_error(exc)}", severity="error")

    def _tunnel_changed(self, name: str, tunnel: SshTunnel, state: TunnelState) -> None:
        self.model.set_link(name, tunnel.describe(), state.phase == "up")
        self._notify_fleet()

    async def _follow_node(self, node: NodeHandle) -> None:
        """Stream one node's frames forever; on any failure show it and retry with back-off."""
        assert node.client is not None
        failures = 0
        last_seq: int | None = None
        while True:
            try:
                async for frame in node.client.stream(since_seq=last_seq, reconnect=False):
                    if not isinstance(frame, TelemetryFrame):
                        raise TypeError(f"agent sent {type(frame).__name__}, not a frame")
                    self.ingest(node.name, frame)
                    last_seq = frame.seq
                    failures = 0
                raise ConnectionError("the agent closed the telemetry stream")
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a dead or garbled agent must never end the app
                failures += 1
                delay = self.services.backoff.delay(failures)
                self.model.mark_error(node.name, describe_error(exc), delay)
                self._notify_fleet()
                await asyncio.sleep(delay)

    # -- telemetry coalescing ---------------------------------------------------

    def ingest(self, node: str, frame: TelemetryFrame) -> None:
        """Feed one frame (the workers' path; tests and the benchmark call it too)."""
        self.model.ingest(node, frame, self.services.clock())
        if self.model.nodes[node].frame is frame:  # not a duplicate after a reconnect
            self.alerts.observe_frame(frame)
        if self._recording[node] and not frame.simulated and self.services.store is not None:
            # GPU energy during a load test: the store turns it into tok/J.  Replayed
            # GPUs are not recorded: their energy has nothing to do with the run.
            self.services.store.add_telemetry([frame])
        if self.redraw_listeners:
            self._arrivals.append(asyncio.get_running_loop().time())
        self._notify_fleet()

    def check_nodes(self) -> None:
        """The node rule: nodes whose frames stopped (also run by the tests); and the
        store's write failure, until every row it held is written."""
        if self.alerts.observe_nodes(self.model):
            self._notify_fleet()
        store = self.services.store
        if self.store_problem is not None and store is not None and store.unsaved == 0:
            self.store_problem = None
            self.notify("the store writes again: every held row is written")
            self._notify_fleet()

    def _store_failed(self, problem: str) -> None:
        """Rows could not be written: said at once, and kept on every screen until they are."""
        if self.store_problem is None:
            self.notify(f"runs are not being saved: {problem}", severity="error", timeout=30)
        self.store_problem = problem
        self._notify_fleet()

    def observe_run(self, node: str, engine_id: str | None, event: RunEvent) -> None:
        """A load run's progress event: alerts link to the run, its failures alert."""
        if self.alerts.observe_run(node, engine_id, event):
            self._notify_fleet()

    def acknowledge(self, alert_id: str) -> None:
        if self.alerts.acknowledge(alert_id) is not None:
            self._notify_fleet()

    def on_unmount(self) -> None:
        if self._store_listener in self.services.store_error_listeners:
            self.services.store_error_listeners.remove(self._store_listener)
        self.alerts.close()
        gc.unfreeze()  # an app run inside a longer process (the tests) leaves its heap collectable

    def record_telemetry(self, node: str, on: bool) -> None:
        """Keep ``node``'s telemetry in the store while a load test runs against it."""
        self._recording[node] += 1 if on else -1

    def _notify_fleet(self) -> None:
        # a redraw already due shows this change too: no message per frame (256 a second
        # from a fleet of 256 nodes, each through Textual's dispatch for nothing)
        if not self._fleet_pending and self._refresh_timer is None:
            self._fleet_pending = True
            self.post_message(FleetChanged())

    def on_fleet_changed(self, message: FleetChanged) -> None:
        self._fleet_pending = False
        # Redraw at most every refresh_s: frames arriving in between are folded
        # into the model and shown by the next redraw, never queued.
        now = asyncio.get_running_loop().time()
        wait = self.config.refresh_s - (now - self._last_refresh)
        if wait > 0:
            if self._refresh_timer is None:
                self._refresh_timer = self.set_timer(wait, self._redraw)
            return
        self._redraw()

    def redraw_now(self) -> None:
        """Redraw from the model at once (tests: no timing in what they assert)."""
        if self._refresh_timer is not None:
            self._refresh_timer.stop()
        self._redraw()

    def _redraw(self) -> None:
        self._refresh_timer = None
        self._last_refresh = asyncio.get_running_loop().time()
        if not self.is_running or not self._screen_stacks.get(self.current_mode):
            return
        # not the help page over it, nor a screen still composing its widgets (a frame
        # can arrive between a push and the new screen's mount)
        if isinstance(self.screen, BaseScreen) and self.screen.is_mounted:
            self.screen.refresh_header()
            self.screen.refresh_fleet()
        if self.redraw_listeners:
            arrivals, self._arrivals = self._arrivals, []
            self.call_after_refresh(self._shown, arrivals)

    def _shown(self, arrivals: list[float]) -> None:
        """After the redraw reached the terminal: tell listeners which frames it showed."""
        shown_at = asyncio.get_running_loop().time()
        for listener in self.redraw_listeners:
            listener(arrivals, shown_at)

    # -- cross-screen messages -----------------------------------------------------

    def on_runs_changed(self, message: RunsChanged) -> None:
        for screen in self._runs_screens():
            screen.post_message(RunsChanged())

    def on_startup_progress(self, message: StartupProgress) -> None:
        for screen in self._runs_screens():
            screen.show_startup(message)
        if message.done:
            self.post_message(RunsChanged())

    def _runs_screens(self) -> list[RunsScreen]:
        """The screens listing stored runs (Compare, History) that were opened already."""
        bases = (stack[0] for mode in SCREENS_BY_MODE if (stack := self._screen_stacks.get(mode)))
        return [screen for screen in bases if isinstance(screen, RunsScreen)]

    def open_node(self, name: str) -> None:
        self.selected_node = name
        self.call_later(self.switch_mode, "node")

    async def action_quit(self) -> None:
        """Quit; during a load test ask first, and a yes stops it (its levels are kept)."""
        load = self._running_load()
        if load is None:
            self.exit()
            return

        def done(confirmed: bool | None) -> None:
            if confirmed:
                # exit once the run is stopped and saved: its end is never lost
                load.stop_run("stopped: the TUI was quit during the run", then=self.exit)

        question = (
            f"A load test is running on {load.running_target}. Quit and stop it? Its "
            "finished levels and requests stay saved; the run is kept as interrupted."
        )
        if not isinstance(self.screen, Confirm):
            self.push_screen(Confirm(question, "Quit", "Keep running"), done)

    def _running_load(self) -> LoadScreen | None:
        stack = self._screen_stacks.get("load")
        screen = stack[0] if stack else None
        if isinstance(screen, LoadScreen) and screen.running_target is not None:
            return screen
        return None

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """The app's single keys (1-6, q, ?) are text in a text field, never commands."""
        if typing(self.screen) and action in typed_actions(bindings_of(type(self))):
            return None
        return True

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            screens = [(title, SCREENS_BY_MODE[mode]) for _, mode, title in TABS]
            screens.append(("Alerts", SCREENS_BY_MODE["alerts"]))
            lists = (FastTable, DataTable, SelectionList)  # what the screens list things in
            self.push_screen(HelpScreen(help_sections(type(self), screens, lists)))


def create_app(config: Config, *, services: Services) -> InferTopApp:
    """The one way to build the app: the CLI, the demo and every test call this."""
    return InferTopApp(config, services)
