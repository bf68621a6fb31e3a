"""``infer-top compare --baseline`` on runs of the real llama-server (the rig's binary and
tiny model, as processes on 127.0.0.1): the same server benched twice passes; the server
started with one slot instead of four, under the same four-stream load, is flagged."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.conftest import Rig
from tests.control.llama import bench_saved, llama_server
from tests.loadgen.conftest import ROOT, infer_top_argv

pytestmark = pytest.mark.docker  # the rig's llama-server binary and tiny model

# Five-fold: well beyond the drift between two runs of one server on a shared 2-core machine
# whose other work comes and goes (seen: TTFT p50 +164 %, output tok/s -43 % at a load
# average of 5), well below what one slot instead of four does to four streams: three of
# them queue behind the one slot, so their TTFT grows by whole requests of 512 tokens while
# a prompt's prefill, all a TTFT with free slots is, stays short (seen with 256 tokens:
# +535 % to +1,444 % as the machine's load went from 7 to 4; the tiny model decodes a lone
# stream faster than four on one thread, so throughput does not show it).
THRESHOLD = "4.0"


LOAD = ("--concurrency", "4", "--requests", "24", "--warmup", "4", "--input-len", "32",
        "--output-len", "512")  # fmt: skip


async def _bench(url: str, db: Path, name: str) -> str:
    return await bench_saved(url, db, name, *LOAD)


def _compare(db: Path, base: str, run: str) -> subprocess.CompletedProcess[str]:
    argv = infer_top_argv("compare", "--baseline", base, run, "--threshold", THRESHOLD,
                          "--db", str(db))  # fmt: skip
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=120)


async def test_fewer_slots_is_flagged_and_the_same_server_passes(rig: Rig, tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    with llama_server(rig, tmp_path / "four.log", slots=4) as url:
        base = await _bench(url, db, "four slots")
        again = await _bench(url, db, "four slots again")
    with llama_server(rig, tmp_path / "one.log", slots=1) as url:
        slow = await _bench(url, db, "one slot")

    same = _compare(db, base, again)
    assert same.returncode == 0, same.stdout + same.stderr
    print(same.stdout)
    assert "no regression beyond 400%" in same.stdout

    slower = _compare(db, base, slow)
    print(slower.stdout)
    assert slower.returncode == 1, slower.stdout + slower.stderr
    assert "regression at c=4: TTFT p50" in " ".join(slower.stdout.split())
