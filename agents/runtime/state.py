"""Deployment records on disk (state dir), so a restarted agent adopts its engines
with their identity and launch settings."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

from agents.runtime import Deployment, RuntimeError_
from agents.security import open_private, private_dir

log = logging.getLogger(__name__)


class StateStore:
    def __init__(self, state_dir: Path) -> None:
        # Records hold launch settings (API keys): owner-only, as the rest of the state dir.
        self.dir = private_dir(state_dir / "deployments")

    def _path(self, dep_id: str) -> Path:
        return self.dir / f"{dep_id}.json"

    def save(self, dep: Deployment, **extra: Any) -> None:
        record = {
            "id": dep.id,
            "kind": dep.kind,
            "runtime": dep.runtime,
            "config": dep.config,
            "gpu_ids": list(dep.gpu_ids),
            "options": dep.options,
            "port": dep.port,
            "host": dep.host,
            "started_at": dep.started_at,
            "simulated": dep.simulated,
            **extra,
        }
        tmp = self._path(dep.id).with_suffix(".tmp")
        try:
            with open_private(tmp, "w") as fh:
                fh.write(json.dumps(record))
            os.replace(tmp, self._path(dep.id))  # never a half-written record
        except OSError as exc:  # full disk, read-only state dir: refuse before starting
            tmp.unlink(missing_ok=True)
            raise RuntimeError_(
                f"cannot record deployment {dep.id} in {self.dir}: {exc.strerror}"
            ) from exc

    def load(self, dep_id: str) -> dict[str, Any] | None:
        try:
            data: dict[str, Any] = json.loads(self._path(dep_id).read_text())
        except (OSError, ValueError):
            return None
        return data

    def all(self, runtime: str) -> list[dict[str, Any]]:
        out = []
        for path in sorted(self.dir.glob("*.json")):
            record = self.load(path.stem)
            if record is not None and record.get("runtime") == runtime:
                out.append(record)
        return out

    def remove(self, dep_id: str) -> None:
        self._path(dep_id).unlink(missing_ok=True)


def deployment_from_record(record: dict[str, Any]) -> Deployment:
    return Deployment(
        id=str(record["id"]),
        kind=str(record["kind"]),
        runtime=str(record["runtime"]),
        config=dict(record.get("config") or {}),
        gpu_ids=tuple(record.get("gpu_ids") or ()),
        options=dict(record.get("options") or {}),
        port=record.get("port"),
        host=str(record.get("host") or "127.0.0.1"),
        started_at=float(record.get("started_at") or 0.0),
        simulated=bool(record.get("simulated")),
    )
