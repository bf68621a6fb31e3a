"""Hold-down: an observation becomes an alert only once its condition held for the
rule's ``hold_s``, and an alert clears only once its condition stayed gone as long,
so a condition that toggles faster than that raises one alert, not many.  A gap
shorter than ``hold_s`` does not restart the holding either: a condition true most
of the time with short gaps still raises."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass

from alerts.config import AlertConfig
from alerts.model import Alert, Observation

Key = tuple[str, str, str]


@dataclass(frozen=True, slots=True)
class Change:
    """An alert raised or cleared (or acknowledged): what the store and hooks get."""

    alert: Alert
    kind: str
    """raised | cleared | acknowledged"""


@dataclass(slots=True)
class _Track:
    held_since: float | None = None
    gone_since: float | None = None
    alert: Alert | None = None


RunOf = Callable[[str, str | None], str | None]
"""(node, engine id) -> the load run active there, if any."""


class AlertEngine:
    """Active alerts and the hold-down state of every condition seen; not thread-safe
    (the control plane calls it from its event loop)."""

    def __init__(self, config: AlertConfig, run_of: RunOf | None = None) -> None:
        self.config = config
        self._tracks: dict[str, dict[Key, _Track]] = {}
        """By node: a frame's update looks at its own node's conditions only (a fleet of
        256 nodes sends 256 frames a second; scanning every node's at each was quadratic)."""
        self._run_of = run_of or (lambda node, engine: None)

    @property
    def active(self) -> list[Alert]:
        alerts = [t.alert for t in self._all_tracks() if t.alert is not None]
        return sorted(alerts, key=lambda a: a.raised_at)

    def update(
        self,
        node: str,
        rules: Collection[str],
        observations: Iterable[Observation],
        now: float,
        target: str | None = None,
    ) -> list[Change]:
        """Take what holds now on ``node`` for ``rules``; every tracked condition of
        those rules on that node (on ``target`` only, when given) that is not among
        ``observations`` is gone."""
        changes: list[Change] = []
        seen: set[Key] = set()
        for obs in observations:
            seen.add(obs.key)
            change = self._holds(obs, now)
            if change is not None:
                changes.append(change)
        for key, track in list(self._tracks.get(node, {}).items()):
            mine = key[0] in rules and target in (None, key[2])
            if mine and key not in seen:
                change = self._gone(key, track, now)
                if change is not None:
                    changes.append(change)
        return changes

    def acknowledge(self, alert_id: str, now: float) -> Change | None:
        for track in self._all_tracks():
            alert = track.alert
            if alert is not None and alert.id == alert_id and alert.acked_at is None:
                track.alert = dataclasses.replace(alert, acked_at=now)
                return Change(track.alert, "acknowledged")
        return None

    def _all_tracks(self) -> Iterator[_Track]:
        return (track for tracks in self._tracks.values() for track in tracks.values())

    def _holds(self, obs: Observation, now: float) -> Change | None:
        tracks = self._tracks.setdefault(obs.node, {})
        track = tracks.get(obs.key)
        if track is None:
            track = tracks[obs.key] = _Track()
        track.gone_since = None
        if track.alert is not None:
            return None
        if track.held_since is None:
            track.held_since = now
        rule = self.config.rule(obs.rule)
        if now - track.held_since < rule.hold_s:
            return None
        track.alert = Alert(
            id=uuid.uuid4().hex[:12],
            rule=obs.rule,
            title=rule.title,
            severity=rule.severity,
            node=obs.node,
            gpu_index=obs.gpu_index,
            engine_id=obs.engine_id,
            value=obs.value,
            message=obs.message,
            raised_at=now,
            run_id=obs.run_id or self._run_of(obs.node, obs.engine_id),
        )
        return Change(track.alert, "raised")

    def _gone(self, key: Key, track: _Track, now: float) -> Change | None:
        if track.gone_since is None:
            track.gone_since = now
        if now - track.gone_since < self.config.rule(key[0]).hold_s:
            return None
        tracks = self._tracks[key[1]]
        del tracks[key]
        if not tracks:
            del self._tracks[key[1]]
        if track.alert is None:
            return None
        cleared = dataclasses.replace(track.alert, cleared_at=now)
        return Change(cleared, "cleared")
