"""``infer-top runs list`` / ``runs show`` piped, as JSON and as TSV, with ``--db`` after the
action: what a script reading them gets."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from store import open_store
from tests.store.conftest import failed_record, record, summary_from_h200

ROOT = Path(__file__).parents[2]
LONG_NAME = "llama.cpp Qwen2.5-7B-Instruct-Q4_K_M prefix caching off, 8 slots, sweep 1-64 on h200-a"
STATUS_REASON = "all 32 requests failed: http_status 32 (exceed_context_size_error)"


@pytest.fixture
def db(tmp_path: Path) -> tuple[Path, list[str]]:
    path = tmp_path / "runs.db"
    with open_store(path) as st:
        ok = st.create_run(name=LONG_NAME, engine_kind="llamacpp", node="h200-a-long-node")
        st.add_level(ok, summary_from_h200(2, 1.0))
        st.add_requests([record(ok, 2, 0), failed_record(ok, 2, 1)])
        st.finish_run(ok)
        bad = st.create_run(name="vllm", engine_kind="vllm", node="h200-a-long-node")
        st.finish_run(bad, status="failed", reason=STATUS_REASON)
        st.flush()
    return path, [ok, bad]


def _runs(*argv: str) -> str:
    """``infer-top runs ARGV`` piped to a script, in an 80-column terminal's environment."""
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    done = subprocess.run(
        [sys.executable, "-m", "tui.cli", "runs", *argv],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_piped_runs_list_and_show_are_not_cut_to_80_columns(db: tuple[Path, list[str]]) -> None:
    path, (ok, bad) = db
    listed = _runs("list", "--db", str(path))  # --db after the action
    for line in listed.splitlines():
        assert "…" not in line
    rows = [line for line in listed.splitlines() if ok in line or bad in line]
    assert LONG_NAME in rows[1] and "h200-a-long-node" in rows[1]  # one line per run
    assert STATUS_REASON in rows[0]
    shown = _runs("show", ok, "--db", str(path))
    assert LONG_NAME in shown and "…" not in shown


def test_runs_list_as_json_and_tsv(db: tuple[Path, list[str]]) -> None:
    path, (ok, bad) = db
    doc = json.loads(_runs("--db", str(path), "list", "--json"))
    assert [r["run_id"] for r in doc] == [bad, ok]
    assert doc[0]["status"] == "failed" and doc[0]["status_reason"] == STATUS_REASON
    assert doc[1]["name"] == LONG_NAME and doc[1]["request_count"] == 2

    header, *rows = _runs("list", "--tsv", "--db", str(path)).splitlines()
    columns = header.split("\t")
    assert columns[:5] == ["run_id", "name", "engine_kind", "node", "status"]
    table = [dict(zip(columns, row.split("\t"), strict=True)) for row in rows]
    assert [r["run_id"] for r in table] == [bad, ok]
    assert table[1]["name"] == LONG_NAME and table[1]["request_count"] == "2"
    assert table[0]["status_reason"] == STATUS_REASON and table[0]["finished_at"][:2] == "20"


def test_runs_show_as_json_and_tsv(db: tuple[Path, list[str]]) -> None:
    path, (ok, _) = db
    doc = json.loads(_runs("show", ok[:6], "--json", "--db", str(path)))
    assert doc["run"]["run_id"] == ok and doc["run"]["name"] == LONG_NAME
    (level,) = doc["levels"]
    assert level["concurrency"] == 64 and level["output_tok_s"] > 0
    assert doc["alerts"] == [] and isinstance(doc["warnings"], list)

    header, row = _runs("show", ok, "--tsv", "--db", str(path)).splitlines()
    fields = dict(zip(header.split("\t"), row.split("\t"), strict=True))
    assert fields["run_id"] == ok and fields["concurrency"] == "64"
    assert float(fields["output_tok_s"]) == pytest.approx(level["output_tok_s"])
    assert fields["energy_j"] == ""  # unknown is empty, not 0


def test_json_and_tsv_together_are_refused(
    db: tuple[Path, list[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    from tui.cli import main

    path, _ = db
    with pytest.raises(SystemExit) as exit_info:
        main(["runs", "list", "--json", "--tsv", "--db", str(path)])
    assert exit_info.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err


def test_db_before_the_command_is_the_commands_own(
    db: tuple[Path, list[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    from tui.cli import main

    path, (ok, bad) = db
    assert main(["--db", str(path), "runs", "list", "--json"]) == 0
    assert [r["run_id"] for r in json.loads(capsys.readouterr().out)] == [bad, ok]
    with pytest.raises(SystemExit) as exit_info:
        main(["--nosuch", "1", "runs", "list"])
    assert exit_info.value.code == 2
    assert "unrecognized arguments: --nosuch 1" in capsys.readouterr().err
