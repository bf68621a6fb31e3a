"""Behaviour more than one screen has: the stored-runs list, the hidden filter box."""

from __future__ import annotations

import asyncio
from typing import ClassVar

from textual import work
from textual.binding import Binding, BindingType
from textual.widgets import Input, Static

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
