"""A load test as the ``RunSetup`` it is stored with (``runs.setup``)."""

from __future__ import annotations

import dataclasses
import json
from typing import TYPE_CHECKING, Any

from loadgen.profiles import Arrival, ClosedLoop, Level, LoadSpec, OpenLoop, ProfileError, Slo
from loadgen.workload import Workload, WorkloadError
from runs.setup import Origin, RunSetup

if TYPE_CHECKING:
    from loadgen.runner import Target


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


def _fields(cls: type, data: Any, what: str) -> dict[str, Any]:
    """``data`` as keyword arguments of ``cls``; unknown keys are refused by name."""
    if not isinstance(data, dict):
        raise ProfileError(f"{what} must be an object, not {type(data).__name__}")
    unknown = sorted(set(data) - {f.name for f in dataclasses.fields(cls)})
    if unknown:
        raise ProfileError(f"unknown {what} field(s): {', '.join(unknown)}")
    return dict(data)


def _level(data: Any) -> Level:
    if isinstance(data, dict) and "concurrency" in data:
        return ClosedLoop(**_fields(ClosedLoop, data, "level"))
    values = _fields(OpenLoop, data, "level")
    values["arrival"] = Arrival(values.get("arrival", Arrival.POISSON))
    return OpenLoop(**values)


def spec_from_plain(data: Any) -> LoadSpec:
    """The ``LoadSpec`` that ``plain(spec)`` gave; ProfileError (a ValueError) in words
    when ``data`` is not one (a field unknown, missing or of the wrong kind)."""
    values = _fields(LoadSpec, data, "load spec")
    try:
        values["levels"] = tuple(_level(level) for level in values.get("levels") or ())
        if values.get("slo") is not None:
            values["slo"] = Slo(**_fields(Slo, values["slo"], "SLO"))
        return LoadSpec(**values)
    except TypeError as exc:
        raise ProfileError(f"bad load spec: {exc}") from None


def workload_from_plain(data: Any) -> Workload:
    """The ``Workload`` that ``plain(workload)`` gave; WorkloadError in words otherwise."""
    try:
        return Workload(**_fields(Workload, data, "workload"))
    except (TypeError, ProfileError) as exc:
        raise WorkloadError(f"bad workload: {exc}") from None
