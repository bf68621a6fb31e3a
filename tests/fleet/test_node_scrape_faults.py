"""An engine on another host whose metrics page is garbage, while the control plane watches
(issue 22): node b's llama.cpp engines are the stand-in engine (tests/agents/standin_engine.py,
run by b's agent as its native llama-server, inside b's namespace). One serves
llama-server's recorded idle pages, the other bytes that are no text: the Node screen's
detail of that engine says why its figures are n/a, the other's does not, and both nodes'
frames keep coming."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from textual.widgets import DataTable

from agents.client import AgentClient
from agents.protocol import EngineInfo
from tests.fleet.on_screen import fleet_on_screen, keeps_updating, seq
from tests.netns import TestNode, network_nodes
from tests.tui.helpers import text_of, wait_until

pytestmark = pytest.mark.netns

STANDIN = Path(__file__).parents[1] / "agents" / "standin_engine.py"
LIVE = Path(__file__).parents[1] / "fixtures" / "llamacpp-live"
GARBAGE = b"\xff\xfe\x00<html>not a metrics page\n"
"""Not UTF-8: the llama.cpp dialect refuses it in words (engines/dialects/prom.py)."""


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the stand-ins' "models" and pages are: the nodes' model directory."""
    return tmp_path_factory.mktemp("engines")


@pytest.fixture(scope="module")
def fleet(pages: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, TestNode]]:
    """Nodes a and b whose native llama-server is the stand-in engine."""
    workdir = tmp_path_factory.mktemp("fleet")
    wrapper = workdir / "llama-server"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{STANDIN}" "$@"\n')
    wrapper.chmod(0o755)
    natives = {"llamacpp": wrapper}
    with network_nodes(("a", "b"), workdir, natives=natives, model_dirs=(pages,)) as nodes:
        yield nodes


def standin(pages: Path, name: str) -> dict[str, Any]:
    """A stand-in's pages (llama-server's recorded idle /metrics and /slots) and the launch
    settings that start it."""
    where = pages / name
    where.mkdir()
    (where / "metrics").write_bytes((LIVE / "metrics-idle.txt").read_bytes())
    (where / "slots").write_bytes((LIVE / "slots-idle.json").read_bytes())
    (where / "model.gguf").touch()
    return {"model": str(where / "model.gguf"), "max_num_seqs": 1, "context_len": 128}


@pytest.fixture
async def good_and_garbled(
    fleet: dict[str, TestNode], pages: Path
) -> AsyncIterator[tuple[EngineInfo, EngineInfo]]:
    """Two stand-ins on b, started through b's agent with good pages; then the second's
    /metrics turns to garbage. Both stopped after the test, whatever became of them."""
    b = fleet["b"]
    async with AgentClient(b.agent_url, b.token) as client:
        started: list[EngineInfo] = []
        try:
            for name in ("good", "garbled"):
                engine = await client.start("llamacpp", standin(pages, name), runtime="process")
                started.append(engine)
                assert engine.health == "healthy", engine.message
            staged = pages / "garbled" / "metrics.new"
            staged.write_bytes(GARBAGE)
            staged.replace(pages / "garbled" / "metrics")  # never half a page
            yield started[0], started[1]
        finally:
            for engine in started:
                await client.stop(engine.id)


async def test_a_garbled_metrics_page_on_another_host_is_shown_for_that_engine_only(
    fleet: dict[str, TestNode], good_and_garbled: tuple[EngineInfo, EngineInfo], tmp_path: Path
) -> None:
    good, garbled = good_and_garbled
    async with fleet_on_screen(fleet, tmp_path) as (app, pilot):

        def refused(engine_id: str) -> bool:
            """The engine's page refused in b's newest frame (any other scrape error, a
            page late on a busy machine, is no garbage)."""
            found = [e for e in app.model.nodes["b"].engines if e.id == engine_id]
            return bool(found) and "payload is not UTF-8" in (found[0].scrape_error or "")

        await wait_until(
            pilot, lambda: refused(garbled.id), "b's garbled engine's scrape error in its frames"
        )
        assert any(e.id == good.id for e in app.model.nodes["b"].engines)
        assert not refused(good.id)
        await keeps_updating(app, pilot, "a")

        # The Node screen of b: the selected engine's detail says why, for that one only.
        app.selected_node = "b"
        await pilot.press("2")
        table = app.screen.query_one("#node-engines", DataTable)
        await wait_until(pilot, lambda: table.row_count == 2, "both of b's engines' rows")
        keys = [str(k.value) for k in table.rows]
        table.focus()

        def detail() -> str:
            return text_of(pilot, "#engine-detail")

        table.move_cursor(row=keys.index(f"b/{garbled.id}"))
        await wait_until(
            pilot,
            lambda: detail().startswith(garbled.id) and "payload is not UTF-8" in detail(),
            "the garbled engine's scrape error in its detail",
        )
        line = next(x for x in detail().splitlines() if "payload is not UTF-8" in x)
        assert line.startswith("scrape failed: "), line
        table.move_cursor(row=keys.index(f"b/{good.id}"))
        await wait_until(
            pilot,
            lambda: detail().startswith(good.id) and "config:" in detail(),
            "the good engine's detail",
        )
        assert "payload is not UTF-8" not in detail(), detail()
        # Nothing stopped meanwhile: both nodes' frames keep coming.
        seq_a, seq_b = seq(app, "a"), seq(app, "b")
        await wait_until(
            pilot,
            lambda: seq(app, "a") >= seq_a + 3 and seq(app, "b") >= seq_b + 3,
            "three more frames from each node",
        )
