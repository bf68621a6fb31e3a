"""benchmarks/proxy_bench.py stays runnable: one request per path through a real agent process
and its native engine (the schedule server), both paths answered and matched to the server's
own stamps. The figures themselves live in docs/benchmarks.md."""

from __future__ import annotations

from benchmarks.proxy_bench import BEFORE, PATHS, ROOT, measure
from loadgen.process import run_in_new_loop


def test_the_proxy_benchmark_measures_both_paths() -> None:
    """With a before tree (this one here), its agent's proxied path is measured too."""
    results, _ = run_in_new_loop(measure([1], [2], 1, ROOT))
    for path in (*PATHS, BEFORE):
        res = results[(1, path)]
        assert len(res.records) == 2, path
        assert all(r.error_kind is None and r.ttft_s for r in res.records), res.records
        # the agent's proxy streams the request body chunked: the server must read it, and
        # each answer is matched to the server's own stamps (one clock: well within a
        # second). The sign of one request's overhead is no test: the proxy forwards the
        # head before the client's send is stamped done, so a server can start its clock
        # first (CI saw -0.26 ms once); the benchmark reports medians over thousands.
        assert len(res.overhead_s) == 2, path
        assert all(abs(o) < 1.0 for o in res.overhead_s), (path, res.overhead_s)
