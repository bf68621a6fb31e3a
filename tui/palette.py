"""Command-palette entries (``:`` or ctrl+p): go to a screen, open a node."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from textual.command import DiscoveryHit, Hit, Hits, Provider

from tui.screens.base import ScreenHost

SCREEN_TITLES: tuple[tuple[str, str], ...] = (
    ("fleet", "Fleet: every node, GPU and engine"),
    ("node", "Node: charts, engines and logs of one node"),
    ("engines", "Engines: start, stop, swap"),
    ("load", "Load test: run a profile against an engine"),
    ("compare", "Compare: runs side by side, export"),
    ("history", "History: stored runs"),
)


class ScreenCommands(Provider):
    def _commands(self) -> list[tuple[str, Callable[[], object], str]]:
        app = self.app
        out: list[tuple[str, Callable[[], object], str]] = [
            (f"Go to {title}", partial(app.switch_mode, mode), f"screen {mode}")
            for mode, title in SCREEN_TITLES
        ]
        if isinstance(app, ScreenHost):
            for name in app.model.nodes:
                out.append((f"Open node {name}", partial(app.open_node, name), "node"))
        return out

    async def discover(self) -> Hits:
        for text, command, help_text in self._commands():
            yield DiscoveryHit(text, command, help=help_text)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for text, command, help_text in self._commands():
            score = matcher.match(text)
            if score > 0:
                yield Hit(score, matcher.highlight(text), command, help=help_text)
