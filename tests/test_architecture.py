"""The layering the project promises (docs/design.md, "Layers"): the import-linter
contracts in pyproject.toml all hold, and none of them was dropped quietly."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Each layer rule of docs/design.md, as the contract that enforces it (by source modules).
PROMISED = {
    ("control", "alerts", "agents", "engines", "loadgen", "sim", "runs", "store", "telemetry"),
    ("engines",),
    ("alerts",),
    ("runs", "telemetry"),
    ("loadgen",),
    ("sim",),
    ("store",),
    ("agents",),
}


def _contracts() -> list[dict[str, object]]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    contracts: list[dict[str, object]] = config["tool"]["importlinter"]["contracts"]
    return contracts


def test_every_promised_layer_rule_is_a_contract() -> None:
    declared = {tuple(c["source_modules"]) for c in _contracts()}  # type: ignore[arg-type]
    assert PROMISED <= declared, f"missing contracts for {sorted(PROMISED - declared)}"


def test_import_contracts_hold() -> None:
    lint = Path(sys.executable).parent / "lint-imports"
    result = subprocess.run([str(lint)], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"Contracts: {len(_contracts())} kept, 0 broken" in result.stdout
