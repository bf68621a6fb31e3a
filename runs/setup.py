"""What a run is and who started it where: the one description every run is
stored with, whoever starts it (docs/design.md, "The run path").

The TUI, ``infer-top bench`` and the demo each build a ``RunSetup``; the
``RunStarted`` event carries it to the recorder, so a run from the TUI and the
same run from the CLI are stored with the same ``profile`` and ``workload``
JSON and compare for regressions.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

Origin = Literal["tui", "bench", "demo", "script"]
"""Who started the run; "script" is a program calling the load generator itself."""


@dataclass(frozen=True, slots=True)
class RunSetup:
    origin: Origin
    engine_kind: str
    model: str
    url: str | None
    """The engine's base URL; None for a run that sent no request (the demo's, in virtual time)."""
    chat: bool
    """True: ``/v1/chat/completions``; False: ``/v1/completions``."""
    spec: Mapping[str, Any]
    """The load spec (levels, stop rule, warm-up, timeouts, SLO, seed) as JSON-ready data."""
    workload: Mapping[str, Any]
    """The workload (lengths, dataset, seed) as JSON-ready data."""
    name: str | None = None
    node: str | None = None
    deployment_id: str | None = None
    gpu_ids: tuple[int, ...] = ()
    """The engine's GPUs: the store sums only their energy over the run's window."""
    simulated: bool = False
    software: Mapping[str, str] = field(default_factory=dict)
    """Versions (or the simulator profile) the figures came from."""

    @property
    def label(self) -> str:
        return self.name or f"{self.engine_kind} {self.model}"

    def profile(self) -> dict[str, Any]:
        """The stored ``profile`` JSON: the same keys whoever started the run."""
        return {
            "origin": self.origin,
            "target": {
                "model": self.model,
                "url": self.url,
                "api": "chat" if self.chat else "completions",
            },
            "spec": dict(self.spec),
        }
