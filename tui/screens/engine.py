"""Engines: start, stop and swap engines on chosen GPUs, with the fit estimate first."""

from __future__ import annotations

import shlex
from collections.abc import Awaitable, Callable
from typing import ClassVar

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import (
    Button,
    DataTable,
    Input,
    Label,
    Log,
    ProgressBar,
    Select,
    SelectionList,
    Static,
)
from textual.widgets.selection_list import Selection

from agents.protocol import EngineInfo, ModelInventory
from control.engine_ops import (
    SWITCH_CHOICES,
    engine_choices,
    fit_view,
    scale_engine,
    start_engine,
    stop_engine,
    swap_engine,
    typed_options,
)
from control.model_fetch import absent_text, pull_then_start
from control.model_fit import find_local, local_fit, local_fits_text, local_label, model_ref
from control.nodes import AgentLike, LaunchFields
from control.services import describe_error
from tui.fasttable import Cell
from tui.messages import EngineActionDone, EngineProgress
from tui.scale_form import ask_scale
from tui.screens.base import BaseScreen
from tui.screens.shared import Confirm
from tui.widgets import ENGINE_COLUMNS, add_fixed_columns, engine_rows, selected_key, sync_table

RUNTIMES = ("auto", "compose", "process", "swarm", "sim")
PULL_AND_START = "pull and start"


def launch_config(
    kind: str, model: str, extra: str, context: str, options: LaunchFields | None = None
) -> LaunchFields:
    """The form as the agent's launch config (``engines.catalog.LaunchConfig`` fields;
    a simulated engine takes its simulator profile in the model field); ``options``:
    the typed start options (``control.engine_ops.typed_options``)."""
    if kind == "sim":
        return {"profile": model.strip()}
    config: LaunchFields = {"model": model.strip(), **(options or {})}
    if extra.strip():
        config["extra_args"] = shlex.split(extra)
    if context.strip():
        config["context_len"] = int(context)
    return config


class EngineScreen(BaseScreen):
    MODE = "engines"
    AUTO_FOCUS = "#node"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("s", "start", "Start"),
        Binding("x", "stop", "Stop"),
        Binding("w", "swap", "Swap"),
        Binding("r", "scale", "Scale"),
    ]

    def body(self) -> ComposeResult:
        self._node_names: list[str] = []
        self._inventory: dict[str, ModelInventory] = {}
        """Per node, the models its agent listed (fetched when the node is picked)."""
        with Horizontal(id="engine-main"):
            with VerticalScroll(id="engine-form"):  # every action in reach at 80x24
                yield Static("Launch", classes="section")
                with Horizontal(classes="row"):
                    yield Label("Node    ")
                    yield Select[str]([], id="node", prompt="node", compact=True)
                with Horizontal(classes="row"):
                    yield Label("Engine  ")
                    yield Select[str](
                        [(k, k) for k in engine_choices()],
                        id="kind",
                        value="llamacpp",
                        allow_blank=False,
                        compact=True,
                    )
                with Horizontal(classes="row"):
                    yield Label("Runtime ")
                    yield Select[str](
                        [(r, r) for r in RUNTIMES],
                        id="runtime",
                        value="auto",
                        allow_blank=False,
                        compact=True,
                    )
                with Horizontal(classes="row"):
                    yield Label("On node ")
                    yield Select[str]([], id="local-model", prompt="its models", compact=True)
                with Horizontal(classes="row"):
                    yield Label("Model   ")
                    yield Input(
                        placeholder="e.g. Llama-3.1-8B or tiny.gguf", id="model", compact=True
                    )
                with Horizontal(classes="row"):
                    yield Label("Context ")
                    yield Input(placeholder="tokens", id="context", type="integer", compact=True)
                    yield Label(" Seqs ", classes="inline")
                    yield Input(placeholder="concurrent", id="seqs", type="integer", compact=True)
                with Horizontal(classes="row"):
                    yield Label("Prefix  ")
                    yield Select[str](
                        [(c, c) for c in SWITCH_CHOICES],
                        id="prefix-caching",
                        value="default",
                        allow_blank=False,
                        compact=True,
                    )
                with Horizontal(classes="row"):
                    yield Label("Chunked ")
                    yield Select[str](
                        [(c, c) for c in SWITCH_CHOICES],
                        id="chunked-prefill",
                        value="default",
                        allow_blank=False,
                        compact=True,
                    )
                with Horizontal(classes="row"):
                    yield Label("Chunk   ")
                    yield Input(placeholder="prefill tokens", id="prefill-chunk", compact=True)
                    yield Label(" Batch ", classes="inline")
                    yield Input(placeholder="max tokens", id="max-batched", compact=True)
                with Horizontal(classes="row"):
                    yield Label("KV type ")
                    yield Input(placeholder="e.g. fp8, q8_0", id="kv-dtype", compact=True)
                with Horizontal(classes="row"):
                    yield Label("Args    ")
                    yield Input(placeholder="--flag value", id="extra", compact=True)
                yield Label("GPUs (space picks)")
                yield SelectionList[int](id="gpus", compact=True)
                yield Static("fit: pick a model and GPUs", id="fit")
                with Horizontal(classes="buttons"):
                    yield Button("Start s", id="start", variant="success", compact=True)
                    yield Button("Swap w", id="swap", variant="warning", compact=True)
                    yield Button("Stop x", id="stop", variant="error", compact=True)
            with Vertical(id="engine-side"):
                yield Static("Engines on the node", classes="section")
                table: DataTable[Cell] = DataTable(id="engine-table", cursor_type="row")
                add_fixed_columns(table, ENGINE_COLUMNS)
                yield table
                yield Static("", id="local-fit")
                yield ProgressBar(total=1.0, id="progress", show_eta=False)
                yield Static("", id="action-status")
                yield Log(id="action-log", max_lines=500)

    def on_mount(self) -> None:
        self.refresh_fleet()

    def _node_name(self) -> str | None:
        value = self.query_one("#node", Select).value
        return value if isinstance(value, str) else None

    def refresh_fleet(self) -> None:
        model = self.top.model
        select = self.query_one("#node", Select)
        if not select.is_mounted:  # its option list is composed when it mounts
            self.call_after_refresh(self.refresh_fleet)
            return
        names = list(model.nodes)
        if self._node_names != names:
            self._node_names = names
            select.set_options([(n, n) for n in names])
            preferred = self.top.selected_node if self.top.selected_node in names else None
            if preferred or names:
                select.value = preferred or names[0]
        node = model.nodes.get(self._node_name() or "")
        gpus = self.query_one("#gpus", SelectionList)
        wanted = [g.index for g in node.frame.gpus] if node and node.frame else []
        shown = [gpus.get_option_at_index(i).value for i in range(gpus.option_count)]
        if shown != wanted:
            gpus.clear_options()
            gpus.add_options(
                [
                    Selection(
                        f"GPU {g.index} {g.name} ({(g.mem_total_bytes or 0) / 2**30:.0f} GiB)",
                        g.index,
                    )
                    for g in (node.frame.gpus if node and node.frame else ())
                ]
            )
            if gpus.option_count:  # space picks the first GPU at once, no Down first
                gpus.highlighted = 0
        sync_table(self.query_one("#engine-table", DataTable), engine_rows([node] if node else []))

    @on(Select.Changed, "#node")
    def node_picked(self) -> None:
        node = self._node_name()
        if node is not None and node not in self._inventory:
            self._load_inventory(node)
        self._offer_models()

    @on(Select.Changed, "#local-model")
    def local_model_picked(self, event: Select.Changed) -> None:
        if isinstance(event.value, str):
            self.query_one("#model", Input).value = event.value

    @on(Select.Changed, "#node")
    @on(Select.Changed, "#kind")
    @on(Input.Changed, "#model")
    @on(Input.Changed, "#context")
    @on(Input.Changed, "#seqs")
    @on(SelectionList.SelectedChanged, "#gpus")
    def update_fit(self) -> None:
        if isinstance(self.query_one("#node", Select).value, str):
            self.refresh_fleet()
        self._show_fit()

    @work(group="inventory", exit_on_error=False)
    async def _load_inventory(self, node: str) -> None:
        handle = self.top.services.node(node)
        if handle is None or handle.client is None:
            return
        try:
            self._inventory[node] = await handle.client.models()
        except Exception as exc:  # an older agent, or one not answering: said, not fatal
            box = self.query_one("#local-fit", Static)
            box.update(f"[yellow]models on {node}: {describe_error(exc)}[/]")
            box.display = True
            return
        self._offer_models()
        self._show_fit()

    def _local_models(self) -> ModelInventory | None:
        return self._inventory.get(self._node_name() or "")

    def _offer_models(self) -> None:
        found = self._local_models()
        models = found.models if found else ()
        self.query_one("#local-model", Select).set_options(
            [(local_label(m), model_ref(m)) for m in models]
        )

    def _fit_inputs(self) -> tuple[str, list[int | None], int | None, int]:
        node = self.top.model.nodes.get(self._node_name() or "")
        picked = set(self.query_one("#gpus", SelectionList).selected)
        mems = [
            g.mem_total_bytes
            for g in (node.frame.gpus if node and node.frame else ())
            if g.index in picked
        ]
        context = self.query_one("#context", Input).value
        seqs = self.query_one("#seqs", Input).value
        kind = str(self.query_one("#kind", Select).value)
        return kind, mems, int(context) if context else None, max(1, int(seqs or 1))

    def _show_fit(self) -> None:
        box = self.query_one("#fit", Static)
        model = self.query_one("#model", Input).value.strip()
        kind, mems, context, seqs = self._fit_inputs()
        found = self._local_models()
        if found is not None:
            listed = self.query_one("#local-fit", Static)
            listed.update(local_fits_text(found, kind, mems, context, seqs))
            listed.display = True
        if not model:
            box.update("fit: pick a model and GPUs")
            return
        local = find_local(found.models, model) if found else None
        try:
            view = (
                local_fit(local, kind, mems, context, seqs)
                if local
                else fit_view(kind, model, mems, context, concurrent_seqs=seqs)
            )
        except Exception as exc:
            box.update(f"fit: no estimate ({describe_error(exc)})")
            return
        style = {True: "green", False: "bold red", None: "yellow"}[view.fits]
        box.update(f"[{style}]{view.text}[/]")

    def _client(self) -> AgentLike | None:
        name = self._node_name()
        handle = self.top.services.node(name) if name else None
        if handle is None or handle.client is None:
            self.notify("pick a node whose agent is configured", severity="error")
            return None
        return handle.client

    def _selected_engine(self) -> str | None:
        key = selected_key(self.query_one("#engine-table", DataTable))
        return key.split("/", 1)[1] if key else None

    def on_button_pressed(self, event: Button.Pressed) -> None:
        {"start": self.action_start, "stop": self.action_stop, "swap": self.action_swap}[
            event.button.id or "start"
        ]()

    def _form(self) -> LaunchFields | None:
        model = self.query_one("#model", Input).value
        if not model.strip():
            self.notify("enter a model first", severity="warning")
            return None
        try:
            options = typed_options(
                prefix_caching=str(self.query_one("#prefix-caching", Select).value),
                chunked_prefill=str(self.query_one("#chunked-prefill", Select).value),
                kv_cache_dtype=self.query_one("#kv-dtype", Input).value,
                max_batched_tokens=self.query_one("#max-batched", Input).value,
                prefill_chunk_tokens=self.query_one("#prefill-chunk", Input).value,
            )
            seqs = self.query_one("#seqs", Input).value
            if seqs.strip():
                options["max_num_seqs"] = int(seqs)
            return launch_config(
                str(self.query_one("#kind", Select).value),
                model,
                self.query_one("#extra", Input).value,
                self.query_one("#context", Input).value,
                options,
            )
        except ValueError as exc:
            self.notify(f"bad arguments: {exc}", severity="error")
            return None

    def action_start(self) -> None:
        client, config = self._client(), self._form()
        if client is None or config is None:
            return
        kind = str(self.query_one("#kind", Select).value)
        runtime = str(self.query_one("#runtime", Select).value)
        picked = None if runtime == "auto" else runtime
        gpus = sorted(self.query_one("#gpus", SelectionList).selected)
        node = self._node_name() or ""
        found = self._local_models()
        absent = absent_text(kind, config.get("model"), found) if found else None
        if absent is None:
            op = start_engine(client, kind, config, gpus, self._progress, runtime=picked)
            self._run(node, "start", op)
            return
        self._confirm(  # rather than a download the engine does unseen
            f"{absent}: the engine would download it itself, showing nothing. Pull it "
            "here first, with its progress, then start?",
            "Pull and start",
            lambda: self._run(
                node,
                PULL_AND_START,
                pull_then_start(client, kind, config, gpus, self._progress, runtime=picked),
            ),
        )

    def action_swap(self) -> None:
        client, config, engine = self._client(), self._form(), self._selected_engine()
        if engine is None:
            self.notify("select the engine to swap in the table", severity="warning")
            return
        if client is None or config is None:
            return
        gpus = sorted(self.query_one("#gpus", SelectionList).selected)
        if gpus and "profile" not in config:  # move to the picked GPUs (simulators have none)
            config["gpu_ids"] = gpus
        node = self._node_name() or ""
        new = config.get("model") or config.get("profile") or "the form's settings"
        self._confirm(
            f"Swap {self._engine_label(node, engine)} for {new}? It stops serving until the "
            "new engine is healthy (the old one comes back if it fails).",
            "Swap",
            lambda: self._run(node, "swap", swap_engine(client, engine, config, self._progress)),
        )

    def action_stop(self) -> None:
        client, engine = self._client(), self._selected_engine()
        if engine is None:
            self.notify("select the engine to stop in the table", severity="warning")
            return
        if client is None:
            return
        node = self._node_name() or ""
        self._confirm(
            f"Stop {self._engine_label(node, engine)}? Its requests in flight fail; "
            "its model cache stays.",
            "Stop",
            lambda: self._run(node, "stop", stop_engine(client, engine, self._progress)),
        )

    def action_scale(self) -> None:
        self._scale(self._selected_engine())

    @work(exclusive=True, group="engine-scale", exit_on_error=False)
    async def _scale(self, selected: str | None) -> None:
        choice = await ask_scale(self.app, self.top.services, selected)
        if choice is not None:
            op = scale_engine(choice.client, choice.engine_id, choice.replicas, self._progress)
            self._run(choice.node, "scale", op)

    def _engine_label(self, node: str, engine_id: str) -> str:
        """The engine in words: its kind, id and node."""
        kind = next(
            (e.kind for at, e in self.top.model.engines() if at == node and e.id == engine_id),
            "engine",
        )
        return f"{kind} {engine_id} on {node}"

    def _confirm(self, question: str, yes: str, then: Callable[[], object]) -> None:
        def done(confirmed: bool | None) -> None:
            if confirmed:
                then()

        self.app.push_screen(Confirm(question, yes, "Keep it"), done)

    def _progress(self, text: str, fraction: float | None) -> None:
        self.post_message(EngineProgress(text, fraction))

    @work(exclusive=True, group="engine-action", exit_on_error=False)
    async def _run(self, node: str, action: str, op: Awaitable[EngineInfo | None]) -> None:
        try:
            result = await op
        except Exception as exc:  # the agent's error, in words, on screen
            self.post_message(EngineActionDone(node, action, False, describe_error(exc)))
            return
        shown = result and ("deployed on Swarm" if result.state == "deployed" else result.health)
        text = f"{action} done" + (f": {result.id} {shown}" if result else "")
        if action == "stop" and result is not None and result.message:
            text += f" — {result.message}"  # e.g. a crashed engine removed without its runtime
        self.post_message(EngineActionDone(node, action, True, text))

    def on_engine_progress(self, message: EngineProgress) -> None:
        if message.fraction is not None:
            self.query_one("#progress", ProgressBar).update(progress=message.fraction)
        self.query_one("#action-status", Static).update(message.text)
        self.query_one("#action-log", Log).write_line(message.text)

    def on_engine_action_done(self, message: EngineActionDone) -> None:
        if message.action == PULL_AND_START:  # the node holds one model more
            self._load_inventory(message.node)
        status = self.query_one("#action-status", Static)
        if message.ok:
            status.update(f"[green]{message.text}[/]")
        else:
            status.update(f"[bold red]{message.action} failed: {message.text}[/]")
            self.notify(f"{message.action} failed: {message.text}", severity="error")
        self.query_one("#action-log", Log).write_line(
            ("ok: " if message.ok else "error: ") + message.text
        )
