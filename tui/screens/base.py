"""What every screen shares: the banner, the screen tabs line, the footer, and what a
screen needs of the app (:class:`ScreenHost`: the app passes itself in, so no screen
imports the app module)."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar, Protocol, runtime_checkable

from rich.markup import escape
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.screen import Screen
from textual.widgets import Footer, Static

from control.alerts import AlertCenter
from control.config import Config, NodeConfig
from control.model import FleetModel
from control.services import Services
from runs.events import RunEvent
from tui.keys import bindings_of, typed_actions, typing

# (key, mode, title): both the tabs line and the app's 1-6 bindings read it
TABS: tuple[tuple[str, str, str], ...] = (
    ("1", "fleet", "Fleet"),
    ("2", "node", "Node"),
    ("3", "engines", "Engines"),
    ("4", "load", "Load test"),
    ("5", "compare", "Compare"),
    ("6", "history", "History"),
)


@runtime_checkable  # the command palette, which Textual builds, checks the app it is given
class ScreenHost(Protocol):
    """What the screens (and the command palette) need of the app."""

    @property
    def services(self) -> Services: ...

    @property
    def model(self) -> FleetModel: ...

    @property
    def alerts(self) -> AlertCenter: ...

    @property
    def config(self) -> Config: ...

    selected_node: str | None
    """The node the Node screen shows (and the Engines screen offers first)."""

    store_problem: str | None
    """Why the store cannot write now (a full disk), else None."""

    def open_node(self, name: str) -> None: ...

    def observe_run(self, node: str, engine_id: str | None, event: RunEvent) -> None:
        """Hand a load run's progress event to the alert rules."""

    def acknowledge(self, alert_id: str) -> None:
        """Silence an active alert (it stays listed, the badge stops counting it)."""

    def record_telemetry(self, node: str, on: bool) -> None:
        """Keep ``node``'s telemetry in the store (on) or stop (off): a load test runs."""

    @property
    def config_file(self) -> Path:
        """The operator's config file (``node add`` adds nodes to it)."""

    def join_node(self, node: NodeConfig) -> bool:
        """Show a node just added to the config and follow it; False where one of that
        name is shown already."""


ALERTS_KEY = "!"


def tabs_line(current: str, alerts: int = 0, critical: bool = False) -> Text:
    """The tabs and, while alerts are active and not acknowledged, their badge."""
    line = Text(" infer-top ", style="bold reverse")
    for key, mode, title in TABS:
        style = "bold reverse cyan" if mode == current else "dim"
        line.append(" ")
        line.append(f" {key} {title} ", style=style)
    if alerts:
        line.append("  ")
        style = "bold white on red" if critical else "bold black on yellow"
        plural = "s" if alerts > 1 else ""
        line.append(f" ▲ {alerts} alert{plural} ", style=style)
        line.append(f" {ALERTS_KEY} to list", style="dim")
    return line


class BaseScreen(Screen[None]):
    MODE = ""
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "leave_field", "Leave the field", show=False),
    ]

    def __init__(self, top: ScreenHost) -> None:
        super().__init__()
        self.top = top
        self._shown_badge = (0, False)
        self._shown_store_problem: str | None = None

    def compose(self) -> ComposeResult:
        yield Static(self._tabs(), id="tabs")
        banner = self.top.services.banner
        if banner:
            yield Static(banner, id="banner")
        problem = Static("", id="store-error")
        problem.display = False
        yield problem
        yield from self.body()
        yield Footer()

    def body(self) -> ComposeResult:
        yield from ()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """In a text field a printable key is text: this screen's single-key shortcuts
        never act there (shown greyed); Esc leaves the field."""
        if typing(self) and action in typed_actions(bindings_of(type(self))):
            return None
        return True

    def action_leave_field(self) -> None:
        if typing(self):
            self.set_focus(self.query_one(self.AUTO_FOCUS) if self.AUTO_FOCUS else None)

    def on_screen_resume(self) -> None:
        self.refresh_header()
        self.refresh_fleet()

    def _badge(self) -> tuple[int, bool]:
        pending = self.top.alerts.unacknowledged
        return len(pending), any(a.severity == "critical" for a in pending)

    def _tabs(self) -> Text:
        self._shown_badge = self._badge()
        return tabs_line(self.MODE, *self._shown_badge)

    def refresh_header(self) -> None:
        """Redraw the tabs line when the alerts badge changed (every redraw asks)."""
        if self._badge() != self._shown_badge:
            # one line high (the stylesheet), so no layout: a layout repaints the whole
            # screen, and a busy fleet's badge changes at nearly every redraw
            self.query_one("#tabs", Static).update(self._tabs(), layout=False)
        problem = self.top.store_problem
        if problem != self._shown_store_problem:
            self._shown_store_problem = problem
            line = self.query_one("#store-error", Static)
            line.update(f"store: {escape(problem)}" if problem else "")
            line.display = problem is not None

    def refresh_fleet(self) -> None:
        """Redraw from the fleet model (called at most every refresh_s)."""
