"""A store's memory does not grow with its file: SQLite's page cache, the one part that
would (a TUI left running fills it as runs are added, benchmarks/soak.py), stays within
``PAGE_CACHE_KIB`` per connection however large the file.  Measured in a process of its
own: SQLite's page-cache figure is per process, and other tests' stores would count."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from store.store import PAGE_CACHE_KIB

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import ctypes, json, sys
import _sqlite3
from store import open_store
from tests.store.conftest import record

def page_cache_bytes():
    now, high = ctypes.c_int64(), ctypes.c_int64()
    # SQLITE_STATUS_PAGECACHE_OVERFLOW: page-cache bytes taken from the heap
    ctypes.CDLL(_sqlite3.__file__).sqlite3_status64(2, ctypes.byref(now), ctypes.byref(high), 0)
    return high.value

store = open_store(sys.argv[1])
ids = []
for run in range(12):
    run_id = store.create_run(name=f"run {run}")
    store.add_requests(record(run_id, 0, i) for i in range(1500))
    ids.append(run_id)
store.flush()
read = sum(1 for run_id in ids for _ in store.iter_requests(run_id))
store.close()
print(json.dumps({"read": read, "page_cache_high": page_cache_bytes()}))
"""


def test_the_stores_page_cache_stays_within_its_bound_however_large_the_file(
    tmp_path: Path,
) -> None:
    db = tmp_path / "runs.db"
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(db)],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    size = sum(p.stat().st_size for p in tmp_path.iterdir())
    bound = 2 * PAGE_CACHE_KIB * 1024 * 1.1  # two connections, a page header's worth over
    assert result["read"] == 12 * 1500
    assert size > 4 * bound, f"the file ({size} B) should outgrow the caches"
    assert result["page_cache_high"] <= bound, result
