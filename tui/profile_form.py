"""The Load screen's profile form: a load test's levels (concurrency or arrival rates),
requests, lengths, warm-up, timeout and SLO, used for the next run or saved as a named
profile in the config file."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Static

from control.load_profiles import LoadProfile, ProfileConfigError, profile_from_form


@dataclass(frozen=True, slots=True)
class ProfileEdit:
    profile: LoadProfile
    save: bool
    """Also write it into the config file (else it is offered until the app ends)."""


FIELDS: tuple[tuple[str, str, str], ...] = (
    # (input id, label, placeholder)
    ("pf-name", "Name     ", "a name for the profile"),
    ("pf-levels", "Levels   ", "concurrency 1,2,4 or rates 0.5,1 req/s"),
    ("pf-requests", "Requests ", "measured requests per level"),
    ("pf-input", "Input    ", "prompt tokens"),
    ("pf-output", "Output   ", "output tokens"),
    ("pf-warmup", "Warm-up  ", "requests per level before measuring"),
    ("pf-timeout", "Timeout  ", "seconds per request"),
    ("pf-slo", "SLO      ", "e.g. ttft=500ms,tpot=50ms (goodput)"),
)


def form_values(profile: LoadProfile) -> dict[str, str]:
    return {
        "pf-name": profile.name,
        "pf-levels": profile.levels_text,
        "pf-requests": str(profile.requests_per_level),
        "pf-input": str(profile.input_len),
        "pf-output": str(profile.output_len),
        "pf-warmup": str(profile.warmup_requests),
        "pf-timeout": f"{profile.timeout_s:g}",
        "pf-slo": profile.slo,
    }


class ProfileForm(ModalScreen[ProfileEdit | None]):
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, profile: LoadProfile, config_file: str) -> None:
        super().__init__()
        self._start = profile
        self._config_file = config_file

    def compose(self) -> ComposeResult:
        values = form_values(self._start)
        with VerticalScroll(id="profile-form"):
            yield Static("Load profile", classes="section")
            for field_id, label, placeholder in FIELDS:
                with Horizontal(classes="row"):
                    yield Label(label)
                    yield Input(
                        values[field_id], placeholder=placeholder, id=field_id, compact=True
                    )
            yield Static("", id="pf-error")
            with Horizontal(id="pf-buttons"):
                yield Button("Use", id="pf-use", variant="primary", compact=True)
                yield Button("Save to config", id="pf-save", variant="success", compact=True)
                yield Button("Cancel", id="pf-cancel", compact=True)
            yield Static(f"saved in {self._config_file}", id="pf-where")

    def on_mount(self) -> None:
        self.query_one("#pf-levels", Input).focus()

    def _profile(self) -> LoadProfile | None:
        typed = [self.query_one(f"#{field_id}", Input).value for field_id, _, _ in FIELDS]
        try:
            return profile_from_form(*typed)
        except ProfileConfigError as exc:
            self.query_one("#pf-error", Static).update(f"[bold red]{exc}[/]")
            return None

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "pf-cancel":
            self.dismiss(None)
            return
        profile = self._profile()
        if profile is not None:
            self.dismiss(ProfileEdit(profile, save=event.button.id == "pf-save"))

    def on_input_submitted(self) -> None:
        profile = self._profile()
        if profile is not None:
            self.dismiss(ProfileEdit(profile, save=False))

    def action_cancel(self) -> None:
        self.dismiss(None)
