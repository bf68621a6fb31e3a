from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from sim import RunningSim, start_sim

StartSim = Callable[..., Awaitable[RunningSim]]

LOADING_S = 2.0
"""How long a test engine stays loading: long enough that the probes a test makes while
it loads still land inside the window on a loaded CI machine (0.4 s did not)."""


@pytest.fixture
async def sim_factory() -> AsyncIterator[StartSim]:
    """Start simulated engines on ephemeral 127.0.0.1 ports; all stopped afterwards."""
    started: list[RunningSim] = []

    async def start(profile: Any, **kwargs: Any) -> RunningSim:
        sim = await start_sim(profile, host="127.0.0.1", port=0, **kwargs)
        started.append(sim)
        return sim

    yield start
    for sim in started:
        await sim.stop()
