"""The Fleet screen's engine and GPU tables as an operator reads them: what each engine runs
and where (model, runtime, GPUs, port, uptime), a node column as wide as the fleet's names,
and one key that cycles the order (node, GPU util, memory, tok/s, KV cache)."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import uuid
from pathlib import Path
from typing import Any

import pytest
from textual.widgets import DataTable

from control.fleet_view import DETAIL_LOG_LINES
from telemetry import EngineTelemetry
from tests.agents.test_engine_faults import engines_killed_afterwards
from tests.conftest import Rig
from tests.tui.conftest import EPOCH, fleet_frames, frozen_app
from tests.tui.driving import live_app
from tests.tui.helpers import painted, text_of, wait_until
from tests.tui.test_snapshots import settle
from tui.app import InferTopApp
from tui.fasttable import FastTable

LONG_NODE = "gpu-rack-12-h200-node-b"


def llamacpp(engine_id: str, model: str, port: int, gpus: tuple[int, ...], **values: Any) -> Any:
    return EngineTelemetry(
        id=engine_id,
        kind="llamacpp",
        state="ready",
        health="healthy",
        model=model,
        runtime="process",
        gpu_ids=gpus,
        port=port,
        started_at=EPOCH - 3725,
        **values,
    )


TWO_LLAMAS = (
    llamacpp("3f2a9c01d4", "/models/qwen2.5-7b-q4_k_m.gguf", 8081, (0,), generation_tok_s=90.0),
    llamacpp("3f2a9c01e7", "/models/llama-3.1-8b-q8_0.gguf", 8082, (1, 2), kv_cache_usage=0.8),
)


def feed(app: InferTopApp, nodes: dict[str, tuple[EngineTelemetry, ...]]) -> None:
    for name, engines in nodes.items():
        for frame in fleet_frames(name, 4, range(90), engines):
            app.ingest(name, frame)


def rows(app: InferTopApp, table_id: str) -> list[dict[str, str]]:
    """The table's rows as the screen shows them, each cell's text by its column."""
    table = app.screen.query_one(table_id, FastTable)
    labels = [label for label, _ in table.columns]
    out = []
    for key in table.keys:
        cells = table.cells(key)
        out.append({lb: getattr(c, "plain", c) for lb, c in zip(labels, cells, strict=False)})
    return out


async def test_two_engines_of_one_kind_show_their_model_port_gpus_and_uptime() -> None:
    app = frozen_app()
    async with app.run_test(size=(160, 48)) as pilot:
        feed(app, {"h200-0": TWO_LLAMAS})
        await settle(pilot, app)
        shown = rows(app, "#engines")
        picked = ("Engine", "Kind", "Model", "Runtime", "GPUs", "Port", "Up", "State", "Health")
        assert [tuple(r[c] for c in picked) for r in shown] == [
            (
                "3f2a9c01d4",
                "llamacpp",
                "qwen2.5-7b-q4_k_m.gguf",
                "process",
                "0",
                "8081",
                "1h03m",
                "ready",
                "healthy",
            ),
            (
                "3f2a9c01e7",
                "llamacpp",
                "llama-3.1-8b-q8_0.gguf",
                "process",
                "1-2",
                "8082",
                "1h03m",
                "ready",
                "healthy",
            ),
        ]
        # and the terminal draws them: the model and the port, not only the hex id
        drawn = painted(app.screen.query_one("#engines", FastTable))
        assert "qwen2.5-7b-q4_k_m…" in drawn and "llama-3.1-8b-q8_0…" in drawn
        assert "8081" in drawn and "8082" in drawn


async def test_the_node_column_fits_the_fleets_node_names() -> None:
    app = frozen_app()
    async with app.run_test(size=(160, 48)) as pilot:
        feed(app, {LONG_NODE: TWO_LLAMAS, "h200-1": ()})
        await settle(pilot, app)
        for table_id in ("#nodes", "#gpus", "#engines"):
            drawn = painted(app.screen.query_one(table_id, FastTable))
            assert LONG_NODE in drawn, f"{table_id} cuts the node name:\n{drawn}"


async def test_o_cycles_the_order_of_the_gpu_and_engine_tables() -> None:
    busy = dataclasses.replace(TWO_LLAMAS[0], id="busy", generation_tok_s=900.0)
    quiet = dataclasses.replace(TWO_LLAMAS[1], id="quiet", generation_tok_s=None)
    app = frozen_app()
    async with app.run_test(size=(160, 48)) as pilot:
        # h200-10 listed first: "by node" orders the names by their numbers' values
        feed(app, {"h200-10": (quiet,), "h200-2": (busy,)})
        await settle(pilot, app)
        assert "sorted by node" in text_of(pilot, "#engines-title")
        assert [r["Node"] for r in rows(app, "#engines")] == ["h200-2", "h200-10"]
        gpu_nodes = [r["Node"] + "/" + r["#"] for r in rows(app, "#gpus")]
        assert gpu_nodes[:5] == ["h200-2/0", "h200-2/1", "h200-2/2", "h200-2/3", "h200-10/0"]

        await pilot.press("o")
        await settle(pilot, app)
        assert "sorted by GPU util" in text_of(pilot, "#gpus-title")
        utils = [r["Util"] for r in rows(app, "#gpus")]
        numbers = [float(u.rstrip("%")) for u in utils if u != "n/a"]
        assert numbers == sorted(numbers, reverse=True) and numbers[0] > numbers[-1]

        await pilot.press("o", "o")  # memory, then tok/s
        await settle(pilot, app)
        assert "sorted by tok/s" in text_of(pilot, "#engines-title")
        # busiest first, an engine reporting no tok/s (n/a) last, never as 0
        assert [(r["Engine"], r["tok/s"]) for r in rows(app, "#engines")] == [
            ("busy", "900"),
            ("quiet", "n/a"),
        ]
        # a GPU's tok/s is its engines': busy's GPU 0 on h200-2 leads the GPU table
        assert rows(app, "#gpus")[0]["Node"] + "/" + rows(app, "#gpus")[0]["#"] == "h200-2/0"

        await pilot.press("o")
        await settle(pilot, app)
        assert "sorted by KV cache" in text_of(pilot, "#engines-title")
        assert [r["Engine"] for r in rows(app, "#engines")] == ["quiet", "busy"]

        await pilot.press("o")
        await settle(pilot, app)
        assert "sorted by node" in text_of(pilot, "#engines-title")


@pytest.mark.docker  # the rig fixture (llama-server binary, tiny model) comes with the rig
async def test_the_node_screen_details_the_selected_engine_and_why_it_crashed(
    rig: Rig, tmp_path: Path
) -> None:
    """Two real llama-servers on one node (process runtime): the selected one's config and
    log in the detail pane; killed, its exit reason and its last log lines."""
    node = f"tui-detail-{uuid.uuid4().hex[:8]}"
    binary = rig.llama_server_bin
    with engines_killed_afterwards(tmp_path / "agent", str(binary)):
        async with live_app(
            tmp_path,
            node,
            "the agent's first frame",
            native_binaries={"llamacpp": binary},
            model_dirs=(rig.tiny_model.parent,),
        ) as live:
            app, pilot, client = live.app, live.pilot, live.client
            launch = {"model": str(rig.tiny_model), "context_len": 256}
            first = await client.start("llamacpp", launch, runtime="process")
            second = await client.start(
                "llamacpp", {**launch, "context_len": 512}, runtime="process"
            )
            assert (first.health, second.health) == ("healthy", "healthy"), second.message
            await pilot.press("2")
            table = app.screen.query_one("#node-engines", DataTable)
            await wait_until(pilot, lambda: table.row_count == 2, "both engines' rows")
            keys = [str(k.value) for k in table.rows]
            table.focus()
            table.move_cursor(row=keys.index(f"{node}/{second.id}"))

            def detail() -> str:
                return text_of(pilot, "#engine-detail")

            await wait_until(pilot, lambda: "context_len=512" in detail(), "the engine's config")
            assert f"port {second.port}" in detail() and "model " + str(rig.tiny_model) in detail()
            assert "llamacpp · process" in detail()

            pid = json.loads((tmp_path / "agent" / "deployments" / f"{second.id}.json").read_text())
            os.killpg(int(pid["pid"]), signal.SIGKILL)
            await wait_until(
                pilot,
                lambda: (
                    "CRASHED: exit code -9: killed by SIGKILL" in detail()
                    and "log lines:" in detail()
                ),
                "the crash's exit reason and log",
                timeout_s=30,
            )
            shown = detail()  # one answer, asked after the crash: the agent's words with it
            (crashed,) = [e for e in await client.engines() if e.id == second.id]
            assert crashed.state == "crashed" and crashed.message, crashed
            assert crashed.message in shown, shown
            logged = [line async for line in client.logs(second.id, DETAIL_LOG_LINES)]
            assert logged and all(line in shown for line in logged)
            for engine in (first, second):
                await client.stop(engine.id)


async def test_the_start_up_heap_is_frozen_out_of_full_collections(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """At 256 nodes x 8 GPUs every full collection walked the start-up heap again (about
    60 ms a redraw): once started, the app freezes it (docs/benchmarks.md, TUI)."""
    import gc

    import tui.app

    monkeypatch.setattr(tui.app, "GC_FREEZE_AFTER_S", 0.1)
    gc.unfreeze()
    app = frozen_app()
    try:
        async with app.run_test(size=(120, 40)) as pilot:
            await wait_until(pilot, lambda: gc.get_freeze_count() > 0, "the heap frozen")
    finally:
        gc.unfreeze()  # the test process's heap is no app's start-up
