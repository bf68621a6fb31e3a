"""``infer-top bench`` end to end against the known-schedule server."""

from __future__ import annotations

import argparse
import csv
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from control import bench as cli
from loadgen import read_jsonl
from tests.loadgen.conftest import bench as bench_process

Serve = Callable[[Callable[[web.Request], Awaitable[web.StreamResponse]]], Awaitable[str]]

FAST = ("--ttft-ms", "5", "--ttft-spread-ms", "5", "--itl-ms", "2")


def bench(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="infer-top")
    cli.register(parser.add_subparsers())
    args = parser.parse_args(["bench", *argv])
    return int(args.func(args))


def test_bench_sweeps_prints_a_table_and_writes_json_csv_jsonl(
    sched_server: Callable[..., Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    server = sched_server(*FAST)
    out_json, out_csv, out_jsonl = tmp_path / "o.json", tmp_path / "o.csv", tmp_path / "r.jsonl"
    code = bench([
        "--url", server.url, "--model", "m", "--engine", "vllm", "--concurrency", "1,4",
        "--requests", "12", "--warmup", "2", "--input-len", "16", "--output-len", "8",
        "--slo", "ttft=1s,tpot=1s", "--json", str(out_json), "--csv", str(out_csv),
        "--jsonl", str(out_jsonl), "--quiet",
    ])  # fmt: skip
    assert code == 0
    shown = capsys.readouterr().out
    assert "c=1" in shown and "c=4" in shown and "TTFT p50 ms" in shown
    doc = json.loads(out_json.read_text())
    assert [lv["concurrency"] for lv in doc["levels"]] == [1, 4]
    assert all(lv["completed"] == 12 and lv["goodput_req_s"] > 0 for lv in doc["levels"])
    assert doc["target"] == {"url": server.url, "model": "m", "engine": "vllm"}
    assert doc["workload"]["output_len"] == 8 and doc["spec"]["warmup_requests"] == 2
    rows = list(csv.DictReader(out_csv.open()))
    assert [r["concurrency"] for r in rows] == ["1", "4"]
    assert float(rows[1]["ttft_p99_s"]) > 0 and rows[1]["failures_by_kind"] == ""
    records, levels = read_jsonl(out_jsonl)
    assert len(records) == 2 * (12 + 2) and len(levels) == 2


def test_bench_takes_the_api_key_from_the_environment(
    sched_server: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    server = sched_server(*FAST)
    monkeypatch.setenv("INFER_TOP_API_KEY", "from-env")
    assert bench(["--url", server.url, "--model", "m", "--requests", "1", "--quiet"]) == 0
    assert {e["auth"] for e in server.truth()["requests"].values()} == {"Bearer from-env"}


def test_bench_saves_the_run_to_the_store(sched_server: Callable[..., Any], tmp_path: Path) -> None:
    from store import open_store

    server = sched_server(*FAST)
    db = tmp_path / "runs.db"
    argv = ["--url", server.url, "--model", "m", "--concurrency", "2", "--requests", "6",
            "--warmup", "1", "--save", "--db", str(db), "--name", "smoke", "--quiet"]  # fmt: skip
    assert bench(argv) == 0
    with open_store(db) as st:
        (run,) = st.list_runs()
        assert run.name == "smoke" and run.status == "completed"
        assert st.request_count(run.run_id) == 7
        stored = list(st.iter_requests(run.run_id))
        assert sum(r.warmup for r in stored) == 1 and all(r.ok for r in stored)
        assert [lv.summary.completed for lv in st.levels(run.run_id)] == [6]
        assert run.engine_kind == "openai" and run.workload["output_len"] == 128


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--requests", "0"], "requests_per_level"),
        (["--input-len", "0"], "input_len"),
        (["--slo", "speed=9"], "bad SLO"),
        (["--dataset", "/nonexistent/sharegpt.json"], "sharegpt.json"),
        (["--warmup", "soon"], "not a duration"),
    ],
)
def test_bad_arguments_give_a_clear_error_and_exit_2(
    argv: list[str], words: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert bench(["--url", "http://127.0.0.1:9", "--model", "m", "--quiet", *argv]) == 2
    assert words in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--concurrency", "1,2,4"], "concurrency 1 cannot be split over 2 load nodes"),
        (["--rate", "4", "--max-concurrency", "1"], "max concurrency 1 cannot be split"),
        (["--requests", "1"], "1 requests per level cannot be split over 2"),
        (["--concurrency", "2", "--via-proxy"], "no --via-proxy"),
    ],
)
def test_a_run_too_small_to_split_over_the_load_nodes_is_refused_before_it_starts(
    argv: list[str], words: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Nothing is asked of the (absent) nodes: the config file does not even exist."""
    where = ["--config", str(tmp_path / "none.toml"), "--node", "b", "--engine-id", "e1"]
    assert bench([*where, "--load-nodes", "a,b", "--quiet", *argv]) == 2
    assert words in capsys.readouterr().err


async def test_all_requests_failing_exits_nonzero_and_says_why(serve: Serve) -> None:
    async def refuse(_: web.Request) -> web.Response:
        return web.json_response({"error": {"message": "overloaded"}}, status=500)

    url = await serve(refuse)
    code, out, _err = await bench_process("--url", url, "--model", "m", "--requests", "2")
    assert code == 1
    assert "failures at c=1: http_status 2" in out


def test_an_endpoint_that_does_not_answer_is_refused_before_the_run(
    unused_tcp_port: int, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    url = f"http://127.0.0.1:{unused_tcp_port}"
    db = tmp_path / "runs.db"
    argv = ["--url", url, "--model", "m", "--requests", "2", "--save", "--db", str(db)]
    assert bench([*argv, "--quiet"]) == 2
    assert f"the endpoint {url} does not answer" in capsys.readouterr().err
    assert not db.exists()


def test_a_full_disk_is_a_clear_error_and_the_store_still_gets_the_records(
    sched_server: Callable[..., Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from store import open_store

    server = sched_server(*FAST)
    db = tmp_path / "runs.db"
    argv = ["--url", server.url, "--model", "m", "--requests", "3", "--jsonl", "/dev/full",
            "--save", "--db", str(db), "--quiet"]  # fmt: skip
    assert bench(argv) == 1
    assert "No space left on device" in capsys.readouterr().err
    with open_store(db) as st:
        (run,) = st.list_runs()
        assert run.status == "failed"
        assert st.request_count(run.run_id) >= 1  # what finished reached the other sink


async def test_a_server_that_cannot_tokenize_gets_words_and_the_warning(
    serve: Serve, tmp_path: Path
) -> None:
    """Named llama.cpp but without its /tokenize: the prompts are words, and the run says
    so on stderr, in its JSON and in the stored run."""

    async def one_token(_: web.Request) -> web.StreamResponse:
        return web.json_response({"error": {"message": "no"}}, status=500)

    url = await serve(one_token)
    out_json, db = tmp_path / "o.json", tmp_path / "runs.db"
    code, _out, err = await bench_process(
        "--url", url, "--model", "m", "--engine", "llamacpp", "--requests", "1",
        "--json", str(out_json), "--save", "--db", str(db),
    )  # fmt: skip
    assert code == 1, err  # its one request failed: the warning is what this test is about
    said = "prompts are common words, not sized in the engine's tokens: its tokenize route "
    said += "failed (/tokenize answered HTTP 404)"
    assert said in " ".join(err.split())
    assert any(said in w for w in json.loads(out_json.read_text())["warnings"])
    from store import open_store

    with open_store(db) as st:
        (run,) = st.list_runs()
    assert (
        run.workload["sizing"] == "words (its tokenize route failed (/tokenize answered HTTP 404))"
    )


@pytest.mark.parametrize(
    "argv",
    [
        ["--url", "http://127.0.0.1:9"],
        ["--node", "a", "--engine-id", "e1", "--load-nodes", "a,b", "--concurrency", "2"],
        ["--node", "a", "--engine-id", "e1", "--via-proxy"],
    ],
)
def test_all_replicas_goes_with_the_manager_and_the_service_alone(
    argv: list[str], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Refused before any node is asked: the config file does not even exist."""
    where = ["--config", str(tmp_path / "none.toml"), "--all-replicas", "--quiet"]
    assert bench([*where, *argv]) == 2
    said = " ".join(capsys.readouterr().err.split())  # as the console wrapped it
    assert (
        "--all-replicas goes with --node (the Swarm manager that deployed the service) and "
        "--engine-id (the service), without --via-proxy or --load-nodes"
    ) in said, said
