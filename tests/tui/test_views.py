"""What the screens compute, read without a terminal: gauges, sparklines, the fleet
model, the comparison table, the fit estimate, exports and error wording."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agents.client import AgentError
from control.compare_view import comparison_curves, comparison_table
from control.engine_ops import fit_view
from control.exporting import export_comparison
from control.model import FleetModel, NodeStatus, gauge, sparkline
from control.services import Backoff, Services, describe_error
from tests.tui.conftest import EPOCH, engines_at_load, fleet_frames


def test_unknown_values_are_na_never_zero() -> None:
    assert gauge(None).startswith("n/a")
    assert gauge(0.0, 4) == "░░░░   0%"
    assert sparkline([None, None], 4) == "  "
    assert sparkline([0, 50, 100], 3, 0, 100) == "▁▅█"
    assert sparkline(range(1000), 5)[-1] == "█"


def test_model_keeps_newest_frame_and_history() -> None:
    model = FleetModel([("n", "http://x")])
    frames = fleet_frames("n", 2, range(5), engines_at_load())
    for f in frames:
        model.ingest("n", f, received_at=EPOCH)
    model.ingest("n", frames[2], received_at=EPOCH)  # a duplicate after a reconnect
    node = model.nodes["n"]
    assert node.frame is frames[-1] and node.status is NodeStatus.OK
    assert len(node.gpu_history[0].util_pct) == 5
    model.mark_error("n", "agent answered 503: draining", 2.0)
    assert (node.status, node.error, node.retry_in_s) == (
        NodeStatus.ERROR,
        "agent answered 503: draining",
        2.0,
    )
    model.ingest("n", fleet_frames("n", 2, range(6, 7))[0], received_at=EPOCH)
    assert node.status is NodeStatus.OK and node.error is None


def test_an_engine_gone_from_its_node_takes_its_history_along() -> None:
    """An engine's tok/s history lives while the engine is in its node's frames: the soak
    (engines started and stopped for 20 minutes) found every stopped engine's kept."""
    model = FleetModel([("n", "http://x")])
    both = engines_at_load()
    for f in fleet_frames("n", 1, range(3), both):
        model.ingest("n", f, received_at=EPOCH)
    node = model.nodes["n"]
    assert set(node.engine_tok_s) == {e.id for e in both}
    assert list(node.engine_tok_s["vllm-a"]) == [4107.0] * 3
    for f in fleet_frames("n", 1, range(3, 5), both[1:]):  # vllm-a stopped
        model.ingest("n", f, received_at=EPOCH)
    assert set(node.engine_tok_s) == {both[1].id}
    for f in fleet_frames("n", 1, range(5, 6), both):  # started again: a fresh history
        model.ingest("n", f, received_at=EPOCH)
    assert list(node.engine_tok_s["vllm-a"]) == [4107.0]


def test_seed_table_is_reproduced_from_simulated_runs(seed_store: Any) -> None:
    runs = seed_store.list_runs()
    comparison = seed_store.compare([r.run_id for r in runs])
    view = comparison_table(comparison)
    assert view.columns[1:8] == ("@1", "@2", "@4", "@8", "@16", "@32", "@64")
    at_64 = {cells[0]: int(cells[7].replace(",", "")) for _, cells in view.rows}
    seed = {
        "trtllm simulated": 7535,
        "lmdeploy simulated": 4246,
        "vllm simulated": 4107,
        "ollama simulated": 588,
        "llamacpp simulated": 431,
    }
    assert set(at_64) == set(seed)
    for engine, tok_s in seed.items():  # the simulators are calibrated to the seed's table
        assert abs(at_64[engine] - tok_s) / tok_s < 0.05, (engine, at_64[engine])
    assert sorted(at_64, key=at_64.__getitem__, reverse=True) == list(seed)
    # The requests vary in length as a real benchmark's do, so engines that queue
    # at 64 clients show a tail: TTFT p99 above p50, not one wait for everyone.
    rows_64 = {r.engine_kind: r for r in comparison.rows if r.concurrency == 64}
    for kind in ("llamacpp", "ollama"):
        p50, p99 = rows_64[kind].ttft_p50_s, rows_64[kind].ttft_p99_s
        assert p50 is not None and p99 is not None and p99 > p50 * 1.01, (kind, p50, p99)
    failures = {cells[0]: float(cells[-2]) for _, cells in view.rows}
    assert failures["llamacpp simulated"] > 0 and failures["vllm simulated"] == 0
    assert all(cells[-1] == "n/a" for _, cells in view.rows)  # no energy measured: n/a
    curves = {c.label: c for c in comparison_curves(comparison)}
    assert curves["vllm simulated"].concurrency == (1, 2, 4, 8, 16, 32, 64)


def test_fit_estimate_in_words() -> None:
    h200 = 150_754_820_096
    fits = fit_view("vllm", "Llama-3.1-8B", [h200])
    assert fits.fits is True and "fits" in fits.text and "weights" in fits.text
    too_big = fit_view("vllm", "Llama-3.1-70B", [80 * 2**30])
    assert too_big.fits is False and "DOES NOT FIT" in too_big.text
    assert fit_view("vllm", "my-own-model", [h200]).fits is None
    assert "pick at least one GPU" in fit_view("vllm", "Llama-3.1-8B", []).text


def test_export_writes_new_files_and_never_overwrites(seed_store: Any, tmp_path: Path) -> None:
    services = Services(store=seed_store, exports_dir=tmp_path)
    ids = [r.run_id for r in seed_store.list_runs()][:2]
    first = export_comparison(services, ids, "json")
    second = export_comparison(services, ids, "json")
    assert first != second and first.parent == tmp_path
    assert json.loads(first.read_text()) == json.loads(second.read_text())
    md = export_comparison(services, ids, "md").read_text()
    assert "simulated" in md


def test_errors_read_as_words_and_backoff_doubles() -> None:
    assert describe_error(AgentError(401, "missing or wrong bearer token")) == (
        "agent answered 401: missing or wrong bearer token"
    )
    assert describe_error(AgentError(0, "connection refused")).startswith("unreachable")
    assert describe_error(json.JSONDecodeError("Expecting value", "<html>", 0)).startswith(
        "garbled answer"
    )
    b = Backoff(initial_s=0.5, max_s=4)
    assert [b.delay(n) for n in (1, 2, 3, 4, 5)] == [0.5, 1.0, 2.0, 4.0, 4.0]
