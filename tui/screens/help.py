"""``?``: every key of every screen on one page, read from the bindings themselves (a key
added to a screen shows here without anyone editing a list)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.dom import DOMNode
from textual.screen import ModalScreen, Screen
from textual.widgets import Static

from tui.keys import bindings_of

TITLE = "[b]infer-top[/b] — keys (as in nvitop / k9s)"
NOTES = (
    "Values a device or engine does not report are shown as n/a, never 0.\n"
    'Simulated engines run on the "sim" runtime (SIM beside their kind in targets and\n'
    'history); replayed GPU telemetry says "replay".'
)

Section = tuple[str, tuple[Binding, ...]]
"""A heading and the bindings listed under it."""


def help_sections(
    everywhere: type[DOMNode],
    screens: Sequence[tuple[str, type[DOMNode]]],
    lists: Sequence[type[DOMNode]],
) -> tuple[Section, ...]:
    """The app's keys and those every screen answers (Textual's focus keys), each
    screen's own, and those of the lists and tables the screens show (one section:
    they answer the same keys everywhere)."""
    common = {b.key: b for b in (*bindings_of(everywhere), *bindings_of(Screen))}
    seen: dict[str, Binding] = {}
    for widget in lists:
        for binding in bindings_of(widget):
            seen.setdefault(binding.key, binding)
    own = (
        (title, tuple(b for b in bindings_of(screen) if common.get(b.key) != b))
        for title, screen in screens
    )
    lists_section = ("Lists and tables", tuple(seen.values()))
    return (("Everywhere", tuple(common.values())), *own, lists_section)


class HelpScreen(ModalScreen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "dismiss", "Close"),
        Binding("question_mark", "dismiss", "Close"),
        Binding("q", "dismiss", "Close"),
    ]

    def __init__(self, sections: Sequence[Section]) -> None:
        super().__init__()
        self.sections = tuple(sections)

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help"):  # scrolls where the terminal is short (80x24)
            yield Static(self._text(), id="help-text")

    def _text(self) -> Text:
        text = Text.from_markup(TITLE)
        for title, bindings in self.sections:
            text.append(f"\n\n{title}", style="bold")
            for binding in bindings:
                what = binding.description or binding.action.replace("_", " ")
                text.append("\n  ")
                text.append(f"{self.app.get_key_display(binding):<12}", style="bold")
                text.append(f" {what}")
        text.append(f"\n\n{NOTES}")
        return text

    async def action_dismiss(self, result: None = None) -> None:
        self.dismiss(None)
