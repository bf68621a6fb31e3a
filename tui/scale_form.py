"""``r`` on the Engines screen: how many replicas a Swarm engine runs.  The services are
the ones the agents that deployed them list (a manager node's), whichever node the
Engines screen shows; the answer goes to that agent."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from textual import on
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Select, Static

from agents.protocol import ServiceInfo
from control.engine_ops import swarm_services
from control.nodes import AgentLike
from control.services import Services


@dataclass(frozen=True, slots=True)
class ScaleChoice:
    node: str
    """The node whose agent deployed the service (it scales it)."""
    engine_id: str
    replicas: int


@dataclass(frozen=True, slots=True)
class ScaleOrder(ScaleChoice):
    client: AgentLike
    """The agent of ``node``."""


async def ask_scale(
    app: App[object], services: Services, selected: str | None
) -> ScaleOrder | None:
    """Find the Swarm services the nodes' agents deployed, then ask which and how many
    replicas (in a worker: it waits for the answer); None where there is none, or the
    operator kept things as they are."""
    found, unanswered = await swarm_services(services.nodes)
    if not found:
        why = f" ({'; '.join(unanswered)})" if unanswered else ""
        app.notify(
            "no Swarm service to scale: start one with runtime swarm through a manager "
            f"node's agent{why}",
            severity="warning",
        )
        return None
    choice = await app.push_screen_wait(ScaleEngine(found, selected))
    handle = services.node(choice.node) if choice else None
    if choice is None or handle is None or handle.client is None:
        return None
    return ScaleOrder(choice.node, choice.engine_id, choice.replicas, handle.client)


def service_label(service: ServiceInfo) -> str:
    running = "?" if service.running is None else str(service.running)
    return f"{service.kind} {service.id} {service.model or ''} · {running}/{service.replicas} run"


def where_text(node: str, service: ServiceInfo) -> str:
    on = ", ".join(service.nodes) or "no node yet"
    return (
        f"deployed from {node}; runs on {on}; may run on {service.placement} (one replica per node)"
    )


class ScaleEngine(ModalScreen[ScaleChoice | None]):
    """Dismissed with the service and its new replica count; Esc or "Keep it": None."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, services: Sequence[tuple[str, ServiceInfo]], selected: str | None) -> None:
        super().__init__()
        self.services = {f"{node}/{s.id}": (node, s) for node, s in services}
        self.first = next(
            (key for key, (_, s) in self.services.items() if s.id == selected),
            next(iter(self.services)),
        )

    def compose(self) -> ComposeResult:
        node, service = self.services[self.first]
        with Vertical(id="scale"):
            yield Label("Scale a Swarm engine: replicas, one per node")
            yield Select[str](
                [(service_label(s), key) for key, (_, s) in self.services.items()],
                id="scale-service",
                value=self.first,
                allow_blank=False,
                compact=True,
            )
            yield Static(where_text(node, service), id="scale-where")
            with Horizontal(id="scale-row"):
                yield Label("Replicas ")
                yield Input(str(service.replicas), id="replicas", type="integer", compact=True)
            with Horizontal(id="scale-buttons"):
                yield Button("Scale", variant="warning", id="scale-yes", compact=True)
                yield Button("Keep it", id="scale-no", compact=True)

    def on_mount(self) -> None:
        self.query_one("#replicas", Input).focus()

    @on(Select.Changed, "#scale-service")
    def service_picked(self, event: Select.Changed) -> None:
        if isinstance(event.value, str) and event.value in self.services:
            node, service = self.services[event.value]
            self.query_one("#scale-where", Static).update(where_text(node, service))
            self.query_one("#replicas", Input).value = str(service.replicas)

    @on(Input.Submitted, "#replicas")
    @on(Button.Pressed, "#scale-yes")
    def scale(self) -> None:
        text = self.query_one("#replicas", Input).value.strip()
        if not text.isdigit():
            self.notify("replicas: a whole number, 0 or more", severity="warning")
            return
        key = self.query_one("#scale-service", Select).value
        node, service = self.services[key if isinstance(key, str) else self.first]
        self.dismiss(ScaleChoice(node, service.id, int(text)))

    @on(Button.Pressed, "#scale-no")
    def action_cancel(self) -> None:
        self.dismiss(None)
