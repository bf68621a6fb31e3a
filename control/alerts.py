"""The control plane's alerts: the rules (``alerts``) fed with every frame, node state
and load-run event the control plane receives, their changes kept in the store and
handed to the hooks.  No Textual: the TUI reads ``active`` and ``recent``."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from alerts import (
    Alert,
    AlertConfig,
    AlertEngine,
    Change,
    FrameRules,
    run_observation,
    stale_observation,
)
from alerts.model import target_of
from alerts.rules import FRAME_RULES
from control.alert_hooks import HookRunner
from control.model import FleetModel
from runs.events import LevelFinished, RunEvent, RunFailed, RunFinished, RunInterrupted, RunStarted
from store import Store
from telemetry import TelemetryFrame

RECENT = 200
"""Cleared alerts kept in memory for the Alerts screen (the store keeps every one)."""


@dataclass(frozen=True, slots=True)
class _ActiveView:
    version: int
    """``AlertCenter.version`` when it was made: every raise, clear or acknowledgement."""
    active: tuple[Alert, ...]
    marks: Mapping[str, Mapping[str, tuple[Alert, ...]]]


class AlertCenter:
    def __init__(
        self,
        config: AlertConfig,
        *,
        store: Store | None = None,
        hooks: HookRunner | None = None,
        clock: Callable[[], float],
    ) -> None:
        self.config = config
        self.store = store
        self.hooks = hooks if hooks is not None else HookRunner(config.hooks)
        self.clock = clock
        self._runs: dict[tuple[str, str | None], str] = {}
        self.engine = AlertEngine(config, run_of=self._run_of)
        self.rules = FrameRules(config)
        self.recent: deque[Alert] = deque(maxlen=RECENT)
        """Cleared alerts, newest first."""
        self._watch_started: dict[str, float] = {}
        self.version = 0
        """Bumped on every change: screens redraw their alert marks when it moves."""
        self._active_view = _ActiveView(self.version, (), {})

    # -- what the screens read ------------------------------------------------

    @property
    def active(self) -> list[Alert]:
        return list(self._view().active)

    @property
    def unacknowledged(self) -> list[Alert]:
        """The header badge's count: active and not silenced."""
        return [a for a in self._view().active if a.acked_at is None]

    def marks(self, node: str) -> Mapping[str, tuple[Alert, ...]]:
        """Active alerts of ``node`` by target ("" the node, "gpu0", "engine ID")."""
        return self._view().marks.get(node, {})

    def _view(self) -> _ActiveView:
        """The active alerts sorted and by node, made again only when ``version`` moved:
        every redraw asks for every node's marks (256 nodes, 8 redraws a second)."""
        if self._active_view.version != self.version:
            active = tuple(self.engine.active)
            marks: dict[str, dict[str, tuple[Alert, ...]]] = {}
            for alert in active:
                of_node = marks.setdefault(alert.node, {})
                of_node[alert.target] = (*of_node.get(alert.target, ()), alert)
            self._active_view = _ActiveView(self.version, active, marks)
        return self._active_view

    # -- what feeds it --------------------------------------------------------

    def observe_frame(self, frame: TelemetryFrame) -> list[Change]:
        """Judge one node's frame; hold-down runs on the node's own clock (frame ts)."""
        node = frame.node
        return self._apply(
            self.engine.update(node, FRAME_RULES, self.rules.observe(frame), frame.ts)
        )

    def observe_nodes(self, model: FleetModel) -> list[Change]:
        """The node rule over every node: how long since its newest frame (or, with none
        yet, since watching began)."""
        now = self.clock()
        changes: list[Change] = []
        for node in model.nodes.values():
            since = node.last_frame_at
            if since is None:
                since = self._watch_started.setdefault(node.name, now)
            obs = stale_observation(node.name, now - since, node.error, self.config)
            found = [obs] if obs is not None else []
            changes += self.engine.update(node.name, ("node_unreachable",), found, now)
        return self._apply(changes)

    def observe_run(self, node: str, engine_id: str | None, event: RunEvent) -> list[Change]:
        """A load run's progress: which run alerts raised meanwhile link to, and the run
        rule at each finished level."""
        key = (node, engine_id)
        match event:
            case RunStarted(run_id=run_id):
                self._runs[key] = run_id
            case LevelFinished(summary=level):
                running = self._runs.get(key)
                if running is None:
                    return []
                obs = run_observation(node, engine_id, running, level, self.config)
                found = [obs] if obs is not None else []
                target = target_of(None, engine_id)
                now = self.clock()
                return self._apply(
                    self.engine.update(node, ("run_failures",), found, now, target=target)
                )
            case RunFinished() | RunFailed() | RunInterrupted():
                self._runs.pop(key, None)
        return []

    def acknowledge(self, alert_id: str) -> Change | None:
        change = self.engine.acknowledge(alert_id, self.clock())
        if change is not None:
            self._apply([change])
        return change

    def close(self) -> None:
        self.hooks.close()

    def _run_of(self, node: str, engine_id: str | None) -> str | None:
        run = self._runs.get((node, engine_id))
        if run is None:  # a GPU or node alert: the run on any of the node's engines
            run = next((r for (n, _), r in self._runs.items() if n == node), None)
        return run

    def _apply(self, changes: list[Change]) -> list[Change]:
        for change in changes:
            self.version += 1
            if change.kind == "cleared":
                self.recent.appendleft(change.alert)
            if self.store is not None:
                self.store.save_alert(change.alert)
            if change.kind in ("raised", "cleared"):
                self.hooks.fire(change.alert, change.kind)
        return changes
