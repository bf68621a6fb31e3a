#!/usr/bin/env bash
# The test command (README quick start #2, and what CI runs):
# set up .venv with the test extra, build / start the real test rig (dockerd,
# compose, llama-server, tiny model, image; cached outside the repo), run the
# static checks, then the whole pytest suite.  Extra arguments go to pytest.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
scripts/setup.sh test
export PATH="$ROOT/.venv/bin:$PATH"
scripts/rig.sh
echo "[test] ruff" >&2;          ruff check . && ruff format --check .
echo "[test] mypy" >&2;          mypy telemetry engines runs alerts loadgen sim store agents control tui
echo "[test] import contracts" >&2; lint-imports
echo "[test] pytest" >&2
exec python -m pytest "$@"
