"""The Node screen lists, GPU by GPU, the processes holding GPU memory and the engine
each belongs to ("other" where none of the node's engines owns it), as nvitop does."""

from __future__ import annotations

import dataclasses

from textual.widgets import DataTable

from tests.tui.conftest import (
    NODE_PROCESSES,
    SIZE,
    VLLM_WORKERS,
    engines_at_load,
    fleet_frames,
    frozen_app,
)
from tests.tui.helpers import painted, wait_until


async def test_the_node_screen_lists_each_gpus_processes_with_their_engine() -> None:
    app = frozen_app()
    frames = fleet_frames(
        "h200-0", 2, range(3), engines_at_load(), processes=NODE_PROCESSES, owners=VLLM_WORKERS
    )
    async with app.run_test(size=SIZE) as pilot:
        for frame in frames:
            app.ingest("h200-0", frame)
        await pilot.press("2")
        await wait_until(pilot, lambda: app.current_mode == "node", "the Node screen")
        table = app.screen.query_one("#gpu-processes", DataTable)
        await wait_until(pilot, lambda: table.row_count == 4, "four GPU processes listed")

        def row(key: str) -> list[str]:
            return [str(cell) for cell in table.get_row(key)]

        # GPU 0: vllm-a's worker first (the most memory), then what no engine owns.
        assert [str(k.value) for k in table.rows][:3] == ["0/4194305", "0/4194398", "0/4194399"]
        assert row("0/4194305") == ["0", "4194305", "C", "vllm-a", "n/a", "21.0G"]
        assert row("0/4194398") == ["0", "4194398", "G", "other", "n/a", "0.1G"]
        assert row("0/4194399") == ["0", "4194399", "C", "other", "n/a", "n/a"]
        assert row("1/4194306") == ["1", "4194306", "C", "vllm-a", "n/a", "21.2G"]
        assert "other" in painted(table) and "vllm-a" in painted(table)

        # The engine's workers exit: the next frame's empty lists empty the table.
        last = frames[-1]
        gone = tuple(dataclasses.replace(g, processes=()) for g in last.gpus)
        app.ingest("h200-0", dataclasses.replace(last, seq=last.seq + 1, gpus=gone))
        app.redraw_now()
        await wait_until(pilot, lambda: table.row_count == 0, "the processes to leave the list")
