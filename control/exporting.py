"""Export a comparison to a file next to the operator (Compare and History screens)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from control.cost import Prices
from control.report_data import build_report
from control.report_html import render_html
from control.services import Services
from store.export import comparison_to_csv, comparison_to_json, comparison_to_markdown
from store.models import Comparison

FORMATS: dict[str, Callable[[Comparison], str]] = {
    "md": comparison_to_markdown,
    "csv": comparison_to_csv,
    "json": comparison_to_json,
}
REPORT_FORMAT = "html"
"""The shareable report (``control.report_html``), the same file ``infer-top report``
writes."""


def export_comparison(
    services: Services, run_ids: Sequence[str], fmt: str, prices: Prices | None = None
) -> Path:
    """Write the comparison of ``run_ids`` as ``fmt`` (a key of ``FORMATS``, or
    ``REPORT_FORMAT`` with the config's ``prices`` for its cost figures) under
    ``services.exports_dir``; never overwrites an earlier export (a counter is added).
    Blocking: call from a thread."""
    store = services.store
    if store is None:
        raise RuntimeError("no run store is configured")
    if not run_ids:
        raise ValueError("pick at least one run")
    if fmt == REPORT_FORMAT:
        text = render_html(build_report(store, run_ids, prices or Prices()))
    else:
        text = FORMATS[fmt](store.compare(list(run_ids)))
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
