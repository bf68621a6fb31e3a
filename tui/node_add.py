"""The Fleet screen's ``node add`` form: the CLI's ``infer-top node add`` (``control.node_add``)
from the TUI. The flow runs in a worker thread (it builds wheels and waits on ssh), each
step's line shown as it comes; once the agent answers, the node joins the fleet at once."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import ClassVar

from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Log

from control.config import ConfigError, NodeConfig
from control.node_add import DEFAULT_PORT, NodeAddRequest, add_node
from control.node_setup import NodeSetupError
from control.ssh_tunnel import TunnelError
from tui.screens.base import ScreenHost

FIELDS: tuple[tuple[str, str], ...] = (
    ("name", "name in infer-top (letters, digits, . _ -)"),
    ("ssh", "ssh destination: user@host or a ~/.ssh/config alias"),
    ("ssh-config", "ssh config file for this node (optional: ssh -F)"),
    ("port", f"the agent's port on the node's loopback ({DEFAULT_PORT})"),
    ("prefix", "where on the node the agent goes (optional)"),
    ("agent-args", "more infer-agent options (optional), e.g. --model-dir=/srv/models"),
    ("wheel-cache", "dependency wheels kept here between runs (optional)"),
)


class NodeAddForm(ModalScreen[None]):
    """Esc closes it; an install under way goes on to its end (the node then joins)."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "close", "Close")]

    def __init__(self, host: ScreenHost) -> None:
        super().__init__()
        self.host = host
        self.busy = False

    def compose(self) -> ComposeResult:
        with Vertical(id="node-add"):
            yield Label(f"Add a node over ssh (to {self.host.config_file})")
            for key, hint in FIELDS:
                yield Input(placeholder=hint, id=f"na-{key}", compact=True)
            yield Log(id="na-progress", max_lines=200)
            with Horizontal(id="node-add-buttons"):
                yield Button("Add", variant="primary", id="na-add", compact=True)
                yield Button("Close", id="na-close", compact=True)

    def _value(self, key: str) -> str:
        return self.query_one(f"#na-{key}", Input).value.strip()

    def request(self) -> NodeAddRequest:
        """The form as a request; ValueError in words for a field that cannot be one."""
        name, destination, port = self._value("name"), self._value("ssh"), self._value("port")
        if not name or not destination:
            raise ValueError("a node needs a name and an ssh destination")
        if port and not port.isdigit():
            raise ValueError(f"port {port!r} is not a number")
        path = {
            key: Path(value).expanduser()
            for key in ("ssh-config", "wheel-cache")
            if (value := self._value(key))
        }
        return NodeAddRequest(
            name=name,
            destination=destination,
            config_file=self.host.config_file,
            ssh_config=path.get("ssh-config"),
            port=int(port) if port else DEFAULT_PORT,
            prefix=self._value("prefix") or None,
            agent_args=tuple(shlex.split(self._value("agent-args"))),
            wheel_cache=path.get("wheel-cache"),
        )

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "na-close":
            self.dismiss(None)
        elif event.button.id == "na-add" and not self.busy:
            try:
                request = self.request()
            except ValueError as exc:
                self.say(f"error: {exc}")
                return
            self.busy = True
            self.query_one("#na-add", Button).disabled = True
            self.install(request)

    def action_close(self) -> None:
        self.dismiss(None)

    def say(self, line: str) -> None:
        for progress in self.query("#na-progress").results(Log):  # none once it is closed
            progress.write_line(line)

    def install(self, request: NodeAddRequest) -> None:
        """The flow in a thread worker of the app's, not this form's: closing the form
        (which cancels its own workers) leaves the install to finish and the node to join."""
        app = self.app

        def run() -> None:
            def say(line: str) -> None:
                app.call_from_thread(self.say, line)

            try:
                node = add_node(request, say)
            except (NodeSetupError, ConfigError, TunnelError, OSError) as exc:
                app.call_from_thread(self._ended, app, None, f"node add failed: {exc}")
                return
            app.call_from_thread(self._ended, app, node, "")

        app.run_worker(run, name="node-add", group="node-add", thread=True, exit_on_error=False)

    def _ended(self, app: App[object], node: NodeConfig | None, error: str) -> None:
        """The install's end; the form may be closed by now (the node joins all the same)."""
        self.busy = False
        for button in self.query("#na-add").results(Button):
            button.disabled = False
        if node is None:
            self.say(error)
            app.notify(error, severity="error")
            return
        joined = self.host.join_node(node)
        done = (
            f"node {node.name} added: it shows in the fleet"
            if joined
            else f"node {node.name} upgraded in place"
        )
        self.say(done)
        app.notify(done)
