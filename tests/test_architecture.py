"""The layering the project promises: only tui/ imports Textual; engines/ and
store/ touch neither Docker nor the agent; loadgen/ never opens the store or a
screen (import-linter contracts in pyproject)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_import_contracts_hold() -> None:
    lint = Path(sys.executable).parent / "lint-imports"
    result = subprocess.run([str(lint)], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Contracts: 3 kept, 0 broken" in result.stdout
