"""infer-top's store: runs, load levels, requests, telemetry and events in
one SQLite file (sqlite-utils), written by one thread, read off the TUI's loop.

    from store import open_store
    with open_store() as st:
        run_id = st.create_run(name="vllm c64", engine_kind="vllm", node="h100-1")
        st.add_request(record); st.add_level(run_id, summary); st.finish_run(run_id)
"""

from store.errors import RunNotFoundError, StoreError, StoreVersionError, StoreWriteError
from store.maintenance import PruneResult
from store.models import (
    Comparison,
    ComparisonRow,
    LevelRow,
    Regression,
    RunInfo,
)
from store.recorder import RunRecorder
from store.schema import SCHEMA_VERSION
from store.store import Store, default_db_path, open_store

__all__ = [
    "SCHEMA_VERSION",
    "Comparison",
    "ComparisonRow",
    "LevelRow",
    "PruneResult",
    "Regression",
    "RunInfo",
    "RunNotFoundError",
    "RunRecorder",
    "Store",
    "StoreError",
    "StoreVersionError",
    "StoreWriteError",
    "default_db_path",
    "open_store",
]
