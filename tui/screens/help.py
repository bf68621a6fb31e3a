"""``?``: every key binding on one page."""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Static

HELP_TEXT = """\
[b]infer-top[/b] — keys (as in nvitop / k9s)

  [b]1[/b] Fleet   [b]2[/b] Node   [b]3[/b] Engines
  [b]4[/b] Load test   [b]5[/b] Compare   [b]6[/b] History
  [b]![/b] alerts   [b]?[/b] help   [b]q[/b] quit   [b]:[/b] / [b]ctrl+p[/b] commands
  [b]/[/b] filter   [b]esc[/b] close
  [b]enter[/b] open the selected node / run

  Fleet      enter: open the node   o: sort by node / GPU util / memory / tok/s / KV
  Node       [ / ]: previous / next node   f: follow the selected engine's logs
             (the selected engine's config, exit reason and last log lines beside it)
  Engines    s: start   x: stop   w: swap (fit estimate shown before starting)
  Load test  r: run the profile against the target engine (saved to the store)
             e: edit the profile (levels, requests, lengths, warm-up, timeout, SLO; save)
  Compare    space: pick runs   m / c / j: export markdown / csv / json
  History    enter / o: open   d: delete   e: export markdown
  Alerts     a: acknowledge (silence) the selected alert; the header counts the rest

Values a device or engine does not report are shown as n/a, never 0.
Engines whose runtime is sim (runs marked SIM) are simulated; replayed GPU telemetry says "replay".
"""


class HelpScreen(ModalScreen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "dismiss", "Close"),
        Binding("question_mark", "dismiss", "Close"),
        Binding("q", "dismiss", "Close"),
    ]

    def compose(self) -> ComposeResult:
        with Vertical(id="help"):
            yield Static(HELP_TEXT, id="help-text")

    async def action_dismiss(self, result: None = None) -> None:
        self.dismiss(None)
