"""What tells compared runs apart: their labels (unique within one comparison) and the
ways their workloads and engines differ (each flagged: such runs measured different work).

The Compare screen, ``infer-top runs compare`` and every export read both from the
``Comparison`` (``store.queries.compare``), so a run is named the same everywhere.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from engines.catalog.options import options_text
from store.models import RunInfo


def run_model(run: RunInfo) -> str | None:
    """The model the run was aimed at, as its profile or workload names it."""
    target = run.profile.get("target")
    places = [run.profile, run.workload, target if isinstance(target, dict) else {}]
    for key in ("model_class", "model", "model_name"):
        for place in places:
            if place.get(key):
                return str(place[key])
    return None


def _workload(key: str) -> Callable[[RunInfo], str | None]:
    def value(run: RunInfo) -> str | None:
        found: Any = run.workload.get(key)
        return None if found is None else str(found)

    return value


Aspect = tuple[str, str, Callable[[RunInfo], str | None]]
"""(name in a warning, prefix in a label, the run's value)"""

MODEL: Aspect = ("model", "", run_model)
"""Not flagged: comparing engines often means one model in each engine's own format."""
ASPECTS: tuple[Aspect, ...] = (
    ("input tokens", "in ", _workload("input_len")),
    ("output tokens", "out ", _workload("output_len")),
    ("length range", "range ", _workload("range_ratio")),
    ("shared prefix tokens", "prefix ", _workload("shared_prefix_len")),
    ("dataset", "", _workload("dataset")),
    ("engine options", "", lambda run: options_text(run.engine_options) or None),
)
"""What a run asked of its engine: runs differing in one of these are flagged."""


def base_label(run: RunInfo) -> str:
    """The run's name (else its engine), "simulated" where it was, its engine's options."""
    options = options_text(run.engine_options)
    sim = " simulated" if run.simulated else ""
    return f"{run.name or run.engine_kind or 'run'}{sim}" + (f" ({options})" if options else "")


def _shown(value: str | None) -> str:
    return "none" if value is None else value


def differences(runs: Sequence[RunInfo]) -> list[str]:
    """One warning per aspect in which the runs differ, each value with how many runs
    (a label says which, where two runs would otherwise read alike)."""
    warnings = []
    for what, _, value_of in ASPECTS:
        counts: dict[str | None, int] = {}
        for run in runs:
            value = value_of(run)
            counts[value] = counts.get(value, 0) + 1
        if len(counts) > 1:
            each = ", ".join(
                f"{_shown(v)} ({n} run{'s' if n > 1 else ''})" for v, n in counts.items()
            )
            warnings.append(f"the runs differ in {what}: {each}; they measured different work")
    return warnings


def _when(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%m-%d %H:%M")


def _prefixed(
    prefix: str, value_of: Callable[[RunInfo], str | None]
) -> Callable[[RunInfo], str | None]:
    def part(run: RunInfo) -> str | None:
        value = value_of(run)
        return None if value is None else f"{prefix}{value}"

    return part


def comparison_labels(runs: Sequence[RunInfo]) -> dict[str, str]:
    """A label per run, unique within ``runs``: its base label, and where two share one,
    what differs between those (node, model, lengths, dataset: the options are in the base
    label already), then their start time, then their id."""
    labels = {run.run_id: base_label(run) for run in runs}
    extras: list[Callable[[RunInfo], str | None]] = [lambda run: run.node]
    extras += [_prefixed(prefix, value_of) for _, prefix, value_of in (MODEL, *ASPECTS[:-1])]
    extras += [lambda run: _when(run.created_at), lambda run: run.run_id]
    for extra in extras:
        clashing: dict[str, list[RunInfo]] = {}
        for run in runs:
            clashing.setdefault(labels[run.run_id], []).append(run)
        for group in clashing.values():
            if len(group) < 2 or len({extra(run) for run in group}) < 2:
                continue
            for run in group:
                part = extra(run)
                if part is not None:
                    labels[run.run_id] += f" · {part}"
    return labels
