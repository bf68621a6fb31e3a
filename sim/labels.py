"""How anything downstream tells a simulated engine from real hardware.

The simulator marks every answer three ways: the ``X-Infer-Top-Simulated: 1``
response header, ``owned_by: "infer-top-sim"`` in ``/v1/models`` and the
``infer_top_simulated 1`` series in every Prometheus text (which the catalog's
parsers keep in ``EngineSample.raw``).  Agents, the store and the TUI use
``is_simulated`` so a simulated run is never filed as a measurement.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engines.sample import EngineSample

SIM_HEADER = "X-Infer-Top-Simulated"
OWNED_BY = "infer-top-sim"
SIMULATED_METRIC = "infer_top_simulated"


def is_simulated(
    *,
    headers: Mapping[str, str] | None = None,
    sample: EngineSample | None = None,
    models: Mapping[str, Any] | None = None,
) -> bool:
    """True when any of the given artefacts carries the simulator's mark."""
    if headers is not None:
        lowered = {k.lower(): v for k, v in headers.items()}
        if lowered.get(SIM_HEADER.lower()) == "1":
            return True
    if sample is not None and sample.raw.get(SIMULATED_METRIC) == 1.0:
        return True
    if models is not None:
        data = models.get("data")
        if isinstance(data, list) and any(
            isinstance(m, Mapping) and m.get("owned_by") == OWNED_BY for m in data
        ):
            return True
    return False
