"""A server that drops, stalls and fails: counted by kind, the run finishes,
every finished request is in the sink."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from loadgen import (
    ClosedLoop,
    ErrorKind,
    JsonlSink,
    LoadSpec,
    MemorySink,
    Target,
    Workload,
    read_jsonl,
    run_load,
)

# The server's plan by request number n (see sched_server.py --faults mix).
PLAN = {
    0: None,
    1: ErrorKind.HTTP_STATUS,
    2: ErrorKind.BROKEN_STREAM,  # dropped after two content chunks
    3: ErrorKind.TIMEOUT,  # stalls after the role chunk
    4: ErrorKind.CONNECT,  # closed before any response byte (also on the retry)
    5: ErrorKind.NO_CONTENT,
}


async def test_faults_are_counted_by_kind_and_every_record_reaches_the_sink(
    sched_server: Callable[..., Any], tmp_path: Path
) -> None:
    server = sched_server(
        "--faults", "mix", "--ttft-ms", "5", "--ttft-spread-ms", "5", "--itl-ms", "2"
    )
    n = 36
    spec = LoadSpec((ClosedLoop(6),), requests_per_level=n, stall_timeout_s=0.5)
    path = tmp_path / "requests.jsonl"
    sink = JsonlSink(path)
    result = await run_load(
        spec, Workload(input_len=8, output_len=6), Target(server.url, "m"), sink, run_id="f"
    )
    sink.close()
    records, levels = read_jsonl(path)
    assert len(records) == n and levels == list(result.levels)
    for r in records:
        expected = PLAN[r.request_index % 6]
        assert r.error_kind is expected, (r.request_index, r.error_message)
    dropped = [r for r in records if r.error_kind is ErrorKind.BROKEN_STREAM]
    assert all(r.counted_output_tokens == 2 for r in dropped)  # partial answers kept
    assert all(r.http_status == 500 for r in records if r.error_kind is ErrorKind.HTTP_STATUS)
    stalled = [r for r in records if r.error_kind is ErrorKind.TIMEOUT]
    assert all("no byte for 0.5 s" in (r.error_message or "") for r in stalled)
    level = result.levels[0]
    assert level.completed == n // 6 and level.failed == n - n // 6 and level.incomplete == 0
    assert level.failures_by_kind == {str(k): n // 6 for k in PLAN.values() if k is not None}
    assert level.failure_rate == (n - n // 6) / n


async def test_a_dead_endpoint_fails_every_request_as_connect_and_ends(
    unused_tcp_port: int, tmp_path: Path
) -> None:
    sink = JsonlSink(tmp_path / "r.jsonl")
    spec = LoadSpec((ClosedLoop(4),), requests_per_level=8)
    target = Target(f"http://127.0.0.1:{unused_tcp_port}", "m")
    result = await run_load(spec, Workload(input_len=4, output_len=4), target, sink)
    sink.close()
    assert result.levels[0].failures_by_kind == {"connect": 8}
    assert len(read_jsonl(tmp_path / "r.jsonl")[0]) == 8


async def test_a_socket_closed_after_each_stream_is_retried_not_failed(
    sched_server: Callable[..., Any],
) -> None:
    """llama-server's pitfall: a pooled keep-alive socket is dead on reuse."""
    server = sched_server(
        "--close-after-stream", "--ttft-ms", "2", "--ttft-spread-ms", "2", "--itl-ms", "1"
    )
    spec = LoadSpec((ClosedLoop(2),), requests_per_level=20)
    sink = MemorySink()
    result = await run_load(
        spec, Workload(input_len=4, output_len=4), Target(server.url, "m"), sink
    )
    assert server.truth()["reuse_drops"] >= 1  # the stale sockets were really reused
    assert result.levels[0].failed == 0 and result.levels[0].completed == 20

    # Told the engine is llama.cpp, the client does not reuse sockets at all.
    server2 = sched_server("--close-after-stream", "--ttft-ms", "2", "--itl-ms", "1")
    sink2 = MemorySink()
    result2 = await run_load(
        spec, Workload(input_len=4, output_len=4), Target(server2.url, "m", "llamacpp"), sink2
    )
    assert server2.truth()["reuse_drops"] == 0
    assert result2.levels[0].completed == 20
