"""Exports (CSV, JSON, Markdown, JSONL) and the ``infer-top runs`` command."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from store import Store, open_store
from store.export import (
    comparison_to_csv,
    comparison_to_json,
    comparison_to_markdown,
    requests_to_jsonl,
)
from tests.store.conftest import failed_record, record, summary_from_h200
from tui.cli import main

ENGINES = (("TensorRT-LLM", "trtllm", 5.0), ("vLLM", "vllm", 2.7), ("llama.cpp", "llamacpp", 1.0))


def _fill(st: Store) -> list[str]:
    ids = []
    for name, kind, scale in ENGINES:
        run_id = st.create_run(
            name=name, engine_kind=kind, node="H100", profile={"model": "Llama-2-7B class"}
        )
        st.add_level(run_id, summary_from_h200(2, scale, failed=3 if kind == "llamacpp" else 0))
        st.add_requests([record(run_id, 2, 0), failed_record(run_id, 2, 1)])
        st.finish_run(run_id)
        ids.append(run_id)
    st.flush()
    return ids


def test_markdown_is_shaped_like_the_design_table(mem_store: Store) -> None:
    c = mem_store.compare(_fill(mem_store))
    lines = comparison_to_markdown(c).strip().splitlines()
    assert lines[0] == "| H100, Llama-2-7B class, 64 concurrent | tok/s | note |"
    assert lines[1] == "|---|---|---|"
    assert lines[2] == "| TensorRT-LLM | 7,511 | lowest TTFT |"
    assert lines[3] == "| vLLM | 4,056 | |"
    assert lines[4] == "| llama.cpp | 1,502 | 2.3% failed: http_status 3 |"
    detailed = comparison_to_markdown(c, detailed=True).splitlines()
    assert detailed[0].endswith(
        "| TTFT p50 ms | TTFT p99 ms | TPOT p50 ms | failed | J/token | note |"
    )


def test_csv_and_json_carry_every_row(mem_store: Store) -> None:
    ids = _fill(mem_store)
    c = mem_store.compare(ids)
    rows = list(csv.DictReader(io.StringIO(comparison_to_csv(c))))
    assert [r["run_id"] for r in rows] == ids
    assert float(rows[0]["output_tok_s"]) == c.rows[0].output_tok_s
    assert rows[0]["energy_j"] == ""  # unknown stays empty, not 0
    doc = json.loads(comparison_to_json(c))
    assert [r["run_id"] for r in doc["runs"]] == ids
    assert doc["rows"][2]["failure_rate"] == c.rows[2].failure_rate


def test_requests_jsonl_has_one_object_per_request(mem_store: Store) -> None:
    (run_id, *_) = _fill(mem_store)
    out = io.StringIO()
    assert requests_to_jsonl(mem_store.iter_requests(run_id), out) == 2
    ok, failed = (json.loads(line) for line in out.getvalue().splitlines())
    assert ok["ttft_s"] == pytest.approx(0.05)
    assert ok["usage_minus_counted"] == 1
    assert len(ok["itl_s"]) == 62
    assert failed["error_kind"] == "http_status" and failed["http_status"] == 503


@pytest.fixture(autouse=True)
def wide_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")  # rich wraps cells to the terminal's width


@pytest.fixture
def db(tmp_path: Path) -> tuple[Path, list[str]]:
    path = tmp_path / "cli.db"
    with open_store(path) as st:
        ids = _fill(st)
    return path, ids


def test_runs_list_show_compare(
    db: tuple[Path, list[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    path, ids = db
    assert main(["runs", "--db", str(path), "list"]) == 0
    out = capsys.readouterr().out
    assert all(i in out for i in ids) and "TensorRT-LLM" in out
    assert main(["runs", "--db", str(path), "show", ids[0][:6]]) == 0
    out = capsys.readouterr().out
    assert "Llama-2-7B class" in out and "c=64" in out
    assert main(["runs", "--db", str(path), "compare", *ids[:2]]) == 0
    out = capsys.readouterr().out
    assert "no regression check" in out and "differ in engine_kind" in out


def test_runs_export_writes_files(db: tuple[Path, list[str]], tmp_path: Path) -> None:
    path, ids = db
    md = tmp_path / "cmp.md"
    assert main(["runs", "--db", str(path), "export", *ids, "--format", "md", "-o", str(md)]) == 0
    assert md.read_text().startswith("| H100, Llama-2-7B class, 64 concurrent | tok/s | note |")
    jl = tmp_path / "req.jsonl"
    assert (
        main(["runs", "--db", str(path), "export", ids[0], "--format", "jsonl", "-o", str(jl)]) == 0
    )
    assert len(jl.read_text().splitlines()) == 2


def test_runs_delete_vacuum_prune(
    db: tuple[Path, list[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    path, ids = db
    assert main(["runs", "--db", str(path), "delete", ids[0]]) == 0
    assert "2 requests" in capsys.readouterr().out
    assert main(["runs", "--db", str(path), "vacuum"]) == 0
    assert "vacuumed" in capsys.readouterr().out
    assert main(["runs", "--db", str(path), "prune", "--older-than", "7d"]) == 0
    assert "pruned 0 GPU" in capsys.readouterr().out
    with open_store(path) as st:
        assert [r.run_id for r in st.list_runs()] == ids[:0:-1]


def test_unknown_run_says_how_to_find_ids(
    db: tuple[Path, list[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    path, _ = db
    assert main(["runs", "--db", str(path), "show", "nosuchrun"]) == 2
    assert "no run nosuchrun; `infer-top runs list` shows the ids" in capsys.readouterr().err


def test_newer_store_file_is_refused_by_the_cli(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import sqlite3

    path = tmp_path / "new.db"
    open_store(path).close()
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA user_version = 99")
    conn.close()
    assert main(["runs", "--db", str(path), "list"]) == 2
    assert "schema version 99" in capsys.readouterr().err


def test_compare_of_one_configuration_lists_regressions(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "reg.db"
    with open_store(path) as st:
        ids = []
        for name, scale in (("[bold]before[/bold]", 1.0), ("after", 0.8)):
            run_id = st.create_run(name=name, engine_kind="vllm", node="H100")
            st.add_level(run_id, summary_from_h200(2, scale))
            ids.append(run_id)
    assert main(["runs", "--db", str(path), "compare", *ids]) == 0
    out = capsys.readouterr().out
    assert "regression c=64 output_tok_s: 1502 -> 1202 (-20.0%)" in out
    assert f"[bold]before[/bold] [{ids[0]}]" in out  # names and ids are shown, not parsed
    assert main(["runs", "--db", str(path), "compare", *ids, "--threshold", "0.5"]) == 0
    assert "no metric got worse by more than 50%" in capsys.readouterr().out
