"""Fixtures for the TUI tests: fixed frames from the real H200 recording, a store
holding the simulated seed comparison, and apps built by the one factory."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from alerts import DEFAULT_RULES, AlertConfig
from control.config import Config
from control.demo_runs import simulate_seed_table
from control.services import Services
from store import open_store
from telemetry import EngineTelemetry, TelemetryFrame
from tests.tui.replay_frames import ReplayNode
from tests.tui.tmux import tmux  # noqa: F401 (a fixture: a real terminal)
from tui.app import InferTopApp, create_app

EPOCH = 1_796_048_940.0
"""Where the replayed frames start (the recording's own first timestamp)."""
SEED_START = 1_796_000_000.0
SIZE = (120, 40)


def engines_at_load() -> tuple[EngineTelemetry, ...]:
    """Engines as a busy node reports them (one reports no KV figure: n/a, not 0)."""
    return (
        EngineTelemetry(
            id="vllm-a",
            kind="vllm",
            state="ready",
            health="healthy",
            simulated=True,
            url="http://127.0.0.1:9/",
            model="meta-llama/Llama-3.1-8B-Instruct",
            runtime="sim",
            gpu_ids=(0, 1, 2, 3),
            port=8000,
            started_at=EPOCH - 3600,
            kv_cache_usage=0.62,
            requests_running=48,
            requests_waiting=16,
            generation_tok_s=4107.0,
            ttft_p50_s=0.412,
        ),
        EngineTelemetry(
            id="ollama-b",
            kind="ollama",
            state="loading",
            health="loading",
            simulated=True,
            model="llama3.2",
            runtime="sim",
            port=11434,
            started_at=EPOCH + 75,
        ),
    )


NODE_PROCESSES = Path(__file__).parents[1] / "fixtures" / "nvml" / "h200-node-processes.json"
"""Process lists with one vllm-a worker per GPU (see its ``about``)."""
VLLM_WORKERS = {4194305 + i: "vllm-a" for i in range(4)}


def fleet_frames(
    name: str,
    gpus: int,
    seconds: range,
    engines: tuple[EngineTelemetry, ...] = (),
    *,
    processes: Path | None = None,
    owners: Mapping[int, str] | None = None,
) -> list[TelemetryFrame]:
    node = ReplayNode(name, gpus=gpus, epoch=EPOCH, processes=processes, owners=owners)
    return node.history(list(seconds), engines)


def frozen_services(**overrides: object) -> Services:
    """Services with no live streams and a frozen clock: snapshots depend on nothing
    but the frames a test feeds."""
    values: dict[str, object] = {"stream_telemetry": False, "clock": lambda: EPOCH + 120}
    values.update(overrides)
    return Services(**values)  # type: ignore[arg-type]


QUIET = AlertConfig(
    rules={name: dataclasses.replace(rule, enabled=False) for name, rule in DEFAULT_RULES.items()}
)
"""No rule evaluated: the replayed H200 is power-capped for 13 s of each lap, and a
screen's own snapshot pins that screen; the alerts' snapshots pin the alerts."""


def frozen_app(services: Services | None = None, alerts: AlertConfig = QUIET) -> InferTopApp:
    config = Config(refresh_s=0.05, alerts=alerts)
    return create_app(config, services=services or frozen_services())


@pytest.fixture
def seed_store(tmp_path: Path) -> Iterator[object]:
    """A real SQLite store holding the simulated seed comparison (fixed run ids)."""
    store = open_store(tmp_path / "runs.db")
    simulate_seed_table(store, node="h100-sim", start_epoch=SEED_START, id_prefix="seed")
    yield store
    store.close()
