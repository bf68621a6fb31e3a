"""Runs that can be compared (issue 19, point 3): by default every run draws fresh
prompts, so no run is served from an earlier run's prefix cache; ``--seed`` sends the
same prompts again when asked, and the stored run says which."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

import aiohttp

from loadgen import PromptSource, Workload
from sim import RunningSim
from store import open_store
from tests.loadgen.conftest import bench

RUN = ("--engine", "vllm", "--concurrency", "1", "--requests", "6", "--input-len", "256",
       "--output-len", "4")  # fmt: skip


async def _truth(sim: RunningSim) -> list[dict[str, Any]]:
    async with aiohttp.ClientSession() as session:
        async with session.get(f"{sim.url}/infer-top/ground-truth") as resp:
            traces: list[dict[str, Any]] = (await resp.json())["traces"]
    return traces


async def _run(sim: RunningSim, tmp_path: Path, name: str, *argv: str) -> tuple[float, int]:
    """One bench run: its TTFT p50 on the engine's own (virtual) clock, which a busy
    machine's scheduling noise cannot move, and the prompt tokens served from cache."""
    before = len(await _truth(sim))
    out = tmp_path / f"{name}.json"
    db = tmp_path / "runs.db"
    code, _out, err = await bench(
        "--url", sim.url, *RUN, "--json", str(out), "--save", "--db", str(db), "--name", name,
        *argv,
    )  # fmt: skip
    assert code == 0, err
    traces = (await _truth(sim))[before:]
    assert len(json.loads(out.read_text())["levels"]) == 1
    ttfts = [t["token_times_s"][0] - t["arrival_s"] for t in traces]
    return statistics.median(ttfts), sum(t["cached_tokens"] for t in traces)


async def test_default_runs_draw_fresh_prompts_and_a_seed_sends_the_same_again(
    vllm_sim: RunningSim, tmp_path: Path
) -> None:
    """With --seed 7 twice the second run was served from the prefix cache (TTFT 158.7 ->
    19.8 ms as measured)."""
    first_ttft, _ = await _run(vllm_sim, tmp_path, "a")
    second_ttft, second_cached = await _run(vllm_sim, tmp_path, "b")
    assert second_cached < 6 * 32  # at most a block's chance match per request
    assert 0.6 < second_ttft / first_ttft < 1.6  # within noise: no earlier run's cache

    await _run(vllm_sim, tmp_path, "s1", "--seed", "7")
    _, seeded_cached = await _run(vllm_sim, tmp_path, "s2", "--seed", "7")
    assert seeded_cached > 6 * 200  # the same prompts again: served from the cache

    with open_store(tmp_path / "runs.db") as st:
        stored = {run.name: run.workload for run in st.list_runs()}
    assert stored["a"]["seed"] is None and stored["a"]["salt"] != stored["b"]["salt"]
    assert stored["s1"]["seed"] == stored["s2"]["seed"] == 7 and stored["s1"]["salt"] == ""


def test_the_same_seed_gives_the_same_prompts_and_no_seed_fresh_ones() -> None:
    seeded = [PromptSource(Workload(input_len=64, seed=7)).item(n).prompt for n in range(3)]
    again = [PromptSource(Workload(input_len=64, seed=7)).item(n).prompt for n in range(3)]
    fresh = [PromptSource(Workload(input_len=64)).item(n).prompt for n in range(3)]
    fresh_again = [PromptSource(Workload(input_len=64)).item(n).prompt for n in range(3)]
    assert seeded == again
    assert not set(fresh) & set(fresh_again)
