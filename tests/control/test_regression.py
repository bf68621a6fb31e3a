"""``infer-top compare --baseline``: a slower run is flagged with a bootstrap judgement from
its per-request records, a run of the same engine is not (issue 21, point 5); here on
hand-built records whose spread is known.  tests/control/test_regression_live.py does
the same against the real llama-server."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from control.significance import bootstrap_change
from loadgen.profiles import ClosedLoop
from loadgen.stats import summarise_level
from runs.records import RequestRecord
from store import Store, open_store
from tests.store.conftest import record
from tui.cli import main

REQUESTS = 60


@pytest.fixture
def db(tmp_path: Path) -> Iterator[tuple[Path, Store]]:
    path = tmp_path / "runs.db"
    st = open_store(path)
    try:
        yield path, st
    finally:
        st.close()


def _records(run_id: str, level: int, slow: float, seed: int) -> list[RequestRecord]:
    """Requests with jittered TTFT (~50 ms) and decode (~7 ms a token), ``slow`` times
    longer; four in flight, each next one sent as one ends (a closed loop)."""
    rng = random.Random(seed)
    out = []
    for i in range(REQUESTS):
        sent = 1000.0 + level * 100 + (i // 4) * 0.55 * slow
        ttft = 0.05 * slow * rng.uniform(0.8, 1.2)
        decode = 63 * 0.007 * slow * rng.uniform(0.9, 1.1)
        out.append(
            record(
                run_id,
                level,
                i,
                sent_at=sent,
                scheduled_at=sent,
                first_token_at=sent + ttft,
                end_at=sent + ttft + decode,
            )
        )
    return out


def _run(st: Store, name: str, slow: float, seed: int) -> str:
    run_id = st.create_run(name=name, engine_kind="llamacpp", node="n1", workload={"out": 64})
    for level, concurrency in enumerate((1, 4)):
        records = _records(run_id, level, slow if concurrency == 4 else 1.0, seed + level)
        st.add_requests(records)
        st.add_level(run_id, summarise_level(level, ClosedLoop(concurrency), records, None))
    st.finish_run(run_id, "completed")
    return run_id


def _compare(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, Any]]:
    code = main(["compare", "--json", *argv])
    out = capsys.readouterr().out
    return code, json.loads(out) if out.strip() else {}


def test_a_run_twice_as_slow_at_one_level_is_flagged_there(
    db: tuple[Path, Store], capsys: pytest.CaptureFixture[str]
) -> None:
    path, st = db
    base, slow = _run(st, "base", 1.0, seed=1), _run(st, "slow", 2.0, seed=2)
    st.flush()
    code, verdict = _compare(capsys, "--baseline", base, slow, "--db", str(path))
    assert code == 1 and verdict["regressed"]
    by_level = {lv["level"]: lv["changes"] for lv in verdict["levels"]}
    flagged = {c["metric"] for c in by_level["c=4"] if c["regression"]}
    assert {"output tok/s", "TTFT p50", "TPOT p50", "E2E p50"} <= flagged
    assert "failure %" not in flagged  # none failed in either
    assert not any(c["regression"] for c in by_level["c=1"])  # same speed there


def test_two_runs_of_one_setup_pass(
    db: tuple[Path, Store], capsys: pytest.CaptureFixture[str]
) -> None:
    path, st = db
    base, again = _run(st, "base", 1.0, seed=1), _run(st, "again", 1.0, seed=7)
    st.flush()
    code, verdict = _compare(capsys, "--baseline", base, again, "--db", str(path))
    assert code == 0 and not verdict["regressed"], verdict
    # the table (no --json) says so in words
    assert main(["compare", "--baseline", base, again, "--db", str(path)]) == 0
    assert "no regression beyond 10%" in capsys.readouterr().out


def test_runs_of_different_workloads_are_refused(
    db: tuple[Path, Store], capsys: pytest.CaptureFixture[str]
) -> None:
    path, st = db
    base = _run(st, "base", 1.0, seed=1)
    other = st.create_run(name="other", engine_kind="llamacpp", node="n1", workload={"out": 9})
    st.flush()
    assert main(["compare", "--baseline", base, other, "--db", str(path)]) == 2
    assert "differ in workload" in capsys.readouterr().err


def test_bootstrap_interval_holds_zero_for_one_distribution() -> None:
    rng = random.Random(3)
    a = [rng.gauss(1.0, 0.1) for _ in range(200)]
    b = [rng.gauss(1.0, 0.1) for _ in range(200)]
    mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
    same = bootstrap_change(a, b, mean, relative=True)
    shifted = bootstrap_change(a, [x * 1.2 for x in b], mean, relative=True)
    assert same is not None and same.holds_zero
    assert shifted is not None and 0.15 < shifted.low < 0.2 < shifted.high < 0.25
