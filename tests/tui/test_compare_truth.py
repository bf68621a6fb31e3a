"""Compare says what it compares: runs whose workloads or models differ are flagged, every
run has its own label (engine, node, what differs, time), the header counts the rows, and
the Markdown export names each run's own model."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from textual.widgets import DataTable, SelectionList

from control.demo_runs import SweepShape, simulate_run
from store import Store, open_store
from tests.tui.conftest import SEED_START, frozen_app, frozen_services
from tests.tui.helpers import text_of, wait_until
from tests.tui.test_snapshots import settle

SHORT = SweepShape(concurrency=(1, 2), min_requests=4)
VLLM = "h100-llama2-7b-vllm"
RUNS = (
    # run id, profile, node, prompt tokens, hours after SEED_START
    ("a-512", VLLM, "h200-a", 512, 0),
    ("a-1024", VLLM, "h200-a", 1024, 1),
    ("b-512", VLLM, "h200-b", 512, 2),
    ("again-512", VLLM, "h200-a", 512, 3),
    ("orin", "orin-llama3.2-3b-llamacpp", "h200-a", 512, 4),
)


@pytest.fixture
def mixed_store(tmp_path: Path) -> Iterator[Store]:
    store = open_store(tmp_path / "runs.db")
    for run_id, profile, node, prompt, hours in RUNS:
        shape = SweepShape(SHORT.concurrency, prompt_tokens=prompt, min_requests=4)
        simulate_run(
            store, profile, node=node, shape=shape, start_epoch=SEED_START + hours * 3600,
            run_id=run_id,
        )  # fmt: skip
    store.flush()
    yield store
    store.close()


def table_rows(table: DataTable[Any]) -> dict[str, str]:
    """The run id and the Engine cell of every row the table shows."""
    return {str(key.value): str(table.get_row(key)[0]) for key in table.rows}


async def test_compare_flags_different_workloads_and_labels_every_run_apart(
    mixed_store: Store, tmp_path: Path
) -> None:
    app = frozen_app(frozen_services(store=mixed_store, exports_dir=tmp_path / "exports"))
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.press("5")
        pick = app.screen.query_one("#pick", SelectionList)
        await wait_until(pilot, lambda: pick.option_count == len(RUNS), "the stored runs")
        pick.select_all()
        table = app.screen.query_one("#compare-table", DataTable)
        await wait_until(pilot, lambda: table.row_count == len(RUNS), "every picked run's row")
        await settle(pilot, app)

        labels = table_rows(table)
        assert len(set(labels.values())) == len(RUNS), labels  # no two runs read alike
        assert labels == {
            "a-512": "vllm simulated · h200-a · in 512 · 11-30 00:53",
            "a-1024": "vllm simulated · h200-a · in 1024",
            "b-512": "vllm simulated · h200-b",
            "again-512": "vllm simulated · h200-a · in 512 · 11-30 03:53",
            "orin": "llamacpp simulated",
        }
        title = text_of(pilot, "#compare-title")
        assert title.startswith(f"{len(RUNS)} runs: ")  # the header counts the rows shown
        assert f"Runs: {len(RUNS)} of {len(RUNS)} picked" in text_of(pilot, "#pick-title")
        flagged = [line for line in title.splitlines() if line.startswith("warning: ")]
        assert (
            "warning: the runs differ in input tokens: 512 (4 runs), 1024 (1 run); "
            "they measured different work" in flagged
        ), flagged
        # one model in two engines' formats is what comparing engines means: not flagged
        assert not any("differ in model" in line for line in flagged)

        await pilot.press("m")
        exports = tmp_path / "exports"

        def exported() -> bool:
            # The file is there once the export's thread opened it, and written once the
            # export's worker is done: read before, a busy box can show it empty.
            exporting = any(w.group == "compare-export" and not w.is_finished for w in app.workers)
            return any(exports.glob("*.md")) and not exporting

        await wait_until(pilot, exported, "the markdown export")
        markdown = next(exports.glob("*.md")).read_text()
    tables = [t for t in markdown.split("\n\n") if t.startswith("| ")]
    for level in tables:
        header, _, *rows = level.splitlines()
        # the title names no one model for runs of two; each row its own, beside its label
        assert "llama-2-7b" not in header and "llama3.2" not in header.lower(), header
        for row in rows:
            label = row.split(" | ")[0].lstrip("| ")
            run_id = next(k for k, v in labels.items() if v == label)
            model = mixed_store.get_run(run_id).profile["target"]["model"]
            assert f"model {model}" in row, row
    assert "> warning: the runs differ in input tokens" in markdown
