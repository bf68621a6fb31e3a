"""Behaviour more than one screen has: the stored-runs list, the hidden filter box, and the
yes/no question every action that ends something (a stored run, a running load test, an
engine, the app during a run) asks first."""

from __future__ import annotations

import asyncio
from typing import ClassVar

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Static

from control.services import describe_error
from tui.messages import RunsChanged, RunsLoaded, StartupProgress
from tui.screens.base import BaseScreen


class RunsScreen(BaseScreen):
    """A screen over the stored runs: it reloads them whenever it shows or they change.

    It needs a `#startup` Static in its body and answers `RunsLoaded`.
    """

    def on_mount(self) -> None:
        self.reload()

    def on_screen_resume(self) -> None:
        self.reload()

    def on_runs_changed(self, message: RunsChanged) -> None:
        self.reload()

    def show_startup(self, message: StartupProgress) -> None:
        box = self.query_one("#startup", Static)
        box.set_class(message.done, "hidden")
        box.update(message.text)

    # exclusive groups are per screen (Textual cancels a group by node)
    @work(exclusive=True, group="runs-load", exit_on_error=False)
    async def reload(self) -> None:
        store = self.top.services.store
        if store is None:
            self.post_message(RunsLoaded(None))
            return
        try:
            runs = await asyncio.to_thread(store.list_runs)
        except Exception as exc:
            self.notify(f"cannot read runs: {describe_error(exc)}", severity="error")
            return
        self.post_message(RunsLoaded(runs))


class FilteredScreen(BaseScreen):
    """A screen with the `/` filter: an `#filter` Input that hides again on escape.

    FILTER_TARGET names the widget that takes the focus back from the box.
    """

    FILTER_TARGET = ""
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("slash", "filter", "Filter", key_display="/"),
        Binding("escape", "clear_filter", "Clear filter", show=False),
    ]

    def action_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.remove_class("hidden")
        box.focus()

    def action_clear_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.value = ""
        box.add_class("hidden")
        self.query_one(self.FILTER_TARGET).focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.query_one(self.FILTER_TARGET).focus()


class Confirm(ModalScreen[bool]):
    """Dismissed with True for ``yes``; Esc or ``no`` keeps things as they are."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, question: str, yes: str, no: str) -> None:
        super().__init__()
        self.question, self.yes, self.no = question, yes, no

    def compose(self) -> ComposeResult:
        with Vertical(id="confirm"):
            yield Label(self.question)
            with Horizontal(id="confirm-buttons"):
                yield Button(self.yes, variant="error", id="yes", compact=True)
                yield Button(self.no, id="no", compact=True)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")

    def action_cancel(self) -> None:
        self.dismiss(False)
