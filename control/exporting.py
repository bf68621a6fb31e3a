"""Export a comparison to a file next to the operator (Compare and History screens)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from control.services import Services
from store.export import comparison_to_csv, comparison_to_json, comparison_to_markdown
from store.models import Comparison

FORMATS: dict[str, Callable[[Comparison], str]] = {
    "md": comparison_to_markdown,
    "csv": comparison_to_csv,
    "json": comparison_to_json,
}


def export_comparison(services: Services, run_ids: Sequence[str], fmt: str) -> Path:
    """Write the comparison of ``run_ids`` as ``fmt`` under ``services.exports_dir``;
    never overwrites an earlier export (a counter is added). Blocking: call from a thread."""
    if services.store is None:
        raise RuntimeError("no run store is configured")
    if not run_ids:
        raise ValueError("pick at least one run")
    text = FORMATS[fmt](services.store.compare(list(run_ids)))
    services.exports_dir.mkdir(parents=True, exist_ok=True)
    stem = "compare-" + "-".join(r[:8] for r in run_ids[:4])
    for n in range(1000):
        path = services.exports_dir / f"{stem}{'' if n == 0 else f'-{n}'}.{fmt}"
        try:
            with path.open("x", encoding="utf-8") as fh:
                fh.write(text)
        except FileExistsError:
            continue
        return path
    raise FileExistsError(f"too many exports named {stem} in {services.exports_dir}")
