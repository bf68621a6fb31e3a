"""A load test as the ``RunSetup`` it is stored with (``runs.setup``)."""

from __future__ import annotations

import dataclasses
import json
from typing import TYPE_CHECKING, Any

from runs.setup import Origin, RunSetup

if TYPE_CHECKING:
    from loadgen.profiles import LoadSpec
    from loadgen.runner import Target
    from loadgen.workload import Workload


def plain(value: Any) -> dict[str, Any]:
    """A frozen dataclass as JSON-ready data (enums as their values)."""
    data: dict[str, Any] = json.loads(json.dumps(dataclasses.asdict(value), default=str))
    return data


def describe_run(
    spec: LoadSpec, workload: Workload, target: Target, *, origin: Origin, **where: Any
) -> RunSetup:
    """The setup of running ``spec`` and ``workload`` at ``target``; ``where`` takes
    RunSetup's placement fields (name, node, deployment_id, gpu_ids, simulated, software)."""
    return RunSetup(
        origin=origin,
        engine_kind=target.engine_kind,
        model=target.model,
        url=target.url,
        chat=target.chat,
        spec=plain(spec),
        workload=plain(workload),
        **where,
    )
