"""The rig's llama-server as a process on 127.0.0.1, and ``infer-top bench`` runs of it
saved to a store: real llama.cpp runs for the compare and report tests."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from store import open_store
from tests.conftest import Rig
from tests.loadgen.conftest import bench
from tests.loadgen.test_llama_server_live import _wait_health
from tests.ports import free_port


@contextmanager
def llama_server(rig: Rig, log: Path, slots: int) -> Iterator[str]:
    """One thread, ``slots`` parallel slots; killed on the way out."""
    port = free_port()
    argv = [str(rig.llama_server_bin), "-m", str(rig.tiny_model), "--host", "127.0.0.1",
            "--port", str(port), "-np", str(slots), "-c", "4096", "-t", "1"]  # fmt: skip
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.kill()
        proc.wait(timeout=30)


async def bench_saved(url: str, db: Path, name: str, *argv: str) -> str:
    """``infer-top bench --url URL ARGV --save``; the stored run's id."""
    await _wait_health(url)
    code, _, err = await bench("--url", url, *argv, "--save", "--db", str(db), "--name", name)
    assert code == 0, err
    with open_store(db) as st:
        return next(r.run_id for r in st.list_runs() if r.name == name)
