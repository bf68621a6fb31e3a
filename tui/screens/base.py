"""What every screen shares: the banner, the screen tabs line, the footer."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.text import Text
from textual.app import ComposeResult
from textual.screen import Screen
from textual.widgets import Footer, Static

if TYPE_CHECKING:
    from tui.app import InferTopApp

# (key, mode, title): both the tabs line and the app's 1-6 bindings read it
TABS: tuple[tuple[str, str, str], ...] = (
    ("1", "fleet", "Fleet"),
    ("2", "node", "Node"),
    ("3", "engines", "Engines"),
    ("4", "load", "Load test"),
    ("5", "compare", "Compare"),
    ("6", "history", "History"),
)


def tabs_line(current: str) -> Text:
    line = Text(" infer-top ", style="bold reverse")
    for key, mode, title in TABS:
        style = "bold reverse cyan" if mode == current else "dim"
        line.append(" ")
        line.append(f" {key} {title} ", style=style)
    return line


class BaseScreen(Screen[Any]):
    MODE = ""

    @property
    def top(self) -> InferTopApp:
        app: Any = self.app
        return app  # type: ignore[no-any-return]

    def compose(self) -> ComposeResult:
        yield Static(tabs_line(self.MODE), id="tabs")
        banner = self.top.services.banner
        if banner:
            yield Static(banner, id="banner")
        yield from self.body()
        yield Footer()

    def body(self) -> ComposeResult:
        yield from ()

    def on_screen_resume(self) -> None:
        self.refresh_fleet()

    def refresh_fleet(self) -> None:
        """Redraw from the fleet model (called at most every refresh_s)."""
