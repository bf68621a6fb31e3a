"""infer-top's store: runs, load levels, requests, telemetry and events in
one SQLite file (sqlite-utils), written by one thread, read off the TUI's loop.

    from store import open_store
    with open_store() as st:
        run_id = st.create_run(name="vllm c64", engine_kind="vllm", node="h100-1")
        st.add_request(record); st.add_level(run_id, summary); st.finish_run(run_id)
"""

from store.errors import RunNotFoundError, StoreError, StoreVersionError, StoreWriteError
from store.fleet import rows_from_frame
from store.maintenance import PruneResult
from store.models import (
    Comparison,
    ComparisonRow,
    EngineRow,
    GpuRow,
    LevelRow,
    Regression,
    RunInfo,
    TelemetryRow,
)
from store.schema import SCHEMA_VERSION
from store.store import Store, default_db_path, open_store

__all__ = [
    "SCHEMA_VERSION",
    "Comparison",
    "ComparisonRow",
    "EngineRow",
    "GpuRow",
    "LevelRow",
    "PruneResult",
    "Regression",
    "RunInfo",
    "RunNotFoundError",
    "Store",
    "StoreError",
    "StoreVersionError",
    "StoreWriteError",
    "TelemetryRow",
    "default_db_path",
    "open_store",
    "rows_from_frame",
]
