"""The rules and their hold-down on replayed sequences: no flapping, named NVML
throttle reasons, thresholds from the config file."""

from __future__ import annotations

import dataclasses

import pytest

from alerts import (
    AlertConfig,
    AlertConfigError,
    AlertEngine,
    FrameRules,
    parse_alert_config,
    throttle_reason_names,
)
from alerts.rules import FRAME_RULES
from telemetry import TelemetryFrame
from tests.tui.conftest import engines_at_load
from tests.tui.replay_frames import ReplayNode


def run_frames(config: AlertConfig, frames: list[TelemetryFrame]) -> list[tuple[str, float]]:
    rules, engine = FrameRules(config), AlertEngine(config)
    out = []
    for frame in frames:
        for change in engine.update(frame.node, FRAME_RULES, rules.observe(frame), frame.ts):
            out.append((change.kind, frame.ts - frames[0].ts))
    return out


def toggled(frames: list[TelemetryFrame], period_s: int) -> list[TelemetryFrame]:
    """The replayed frames with the power-cap bit on and off every ``period_s``."""
    out = []
    for i, frame in enumerate(frames):
        bit = 0x4 if (i // period_s) % 2 == 0 else 0
        gpus = tuple(dataclasses.replace(g, throttle_reasons=bit) for g in frame.gpus)
        out.append(dataclasses.replace(frame, gpus=gpus))
    return out


def test_a_condition_toggling_faster_than_the_hold_down_raises_one_alert() -> None:
    frames = ReplayNode("h200-0").history(range(120))
    config = parse_alert_config({"rules": {"power_throttled": {"hold_s": 5}}})
    # on 2 s, off 2 s for a minute: it never stays gone 5 s, so it stays one alert
    flapping = toggled(frames[:60], 2)
    calm = [
        dataclasses.replace(
            f, gpus=tuple(dataclasses.replace(g, throttle_reasons=0) for g in f.gpus)
        )
        for f in frames[60:]
    ]
    changes = run_frames(config, flapping + calm)
    # first held at 0 s (gaps under 5 s do not restart it), last held at 57 s
    assert changes == [("raised", 5.0), ("cleared", 63.0)], changes


def test_toggling_slower_than_the_hold_down_raises_each_time() -> None:
    frames = ReplayNode("h200-0").history(range(60))
    config = parse_alert_config({"rules": {"power_throttled": {"hold_s": 5}}})
    kinds = [kind for kind, _ in run_frames(config, toggled(frames, 15))]
    assert kinds == ["raised", "cleared", "raised", "cleared"]


def test_throttle_reasons_are_named_as_nvml_names_them() -> None:
    assert throttle_reason_names(0x4 | 0x1) == ["SwPowerCap"]
    assert throttle_reason_names(0x8 | 0x40 | 0x80) == [
        "HwPowerBrakeSlowdown",
        "HwThermalSlowdown",
        "HwSlowdown",
    ]


@pytest.mark.parametrize(
    ("table", "words"),
    [
        ({"rules": {"kv_cache_full": {"threshold": "high"}}}, "must be a number"),
        ({"rules": {"kv_full": {}}}, "no such rule"),
        ({"rules": {"engine_exited": {"threshold": 1}}}, "has no threshold"),
        ({"rules": {"kv_cache_full": {"severity": "loud"}}}, "must be one of"),
        ({"hooks": {"critical": {}}}, "needs a command or a webhook"),
        ({"hooks": {"critical": {"webhook": "ftp://x"}}}, "http:// or https://"),
        ({"hooks": {"urgent": {"command": ["x"]}}}, "not a severity"),
    ],
)
def test_a_bad_alerts_table_is_refused_in_words(table: dict[str, object], words: str) -> None:
    with pytest.raises(AlertConfigError, match=words):
        parse_alert_config(table)


def test_an_engine_gone_from_its_node_takes_its_trends_along() -> None:
    """The soak (engines started and stopped for 20 minutes) found every stopped engine's
    trend history kept; and an engine seen again starts a fresh trend."""
    config = parse_alert_config({"rules": {"queue_growing": {"threshold": 1}}})
    rules = FrameRules(config)
    engine = engines_at_load()[0]
    frames = ReplayNode("h200-0").history(range(6))

    def waiting(frame: TelemetryFrame, n: int | None) -> list[str]:
        engines = () if n is None else (dataclasses.replace(engine, requests_waiting=n),)
        seen = rules.observe(dataclasses.replace(frame, engines=engines))
        return [o.rule for o in seen if o.rule == "queue_growing"]

    assert waiting(frames[0], 2) == [] and waiting(frames[1], 9) == ["queue_growing"]
    assert waiting(frames[2], None) == []  # the engine stopped
    assert rules._trends["h200-0"] == {}
    # back (its queue smaller than before it went): no growth against its old values
    assert waiting(frames[3], 5) == [] and waiting(frames[4], 6) == ["queue_growing"]
