#!/usr/bin/env bash
# Create .venv and install infer-top into it (with the test extra when asked).
# On a fresh Debian 12 (root, Python 3.11) this also installs python3-venv.
# Usage: scripts/setup.sh [EXTRAS]     e.g. scripts/setup.sh test
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
extras="${1:-}"
PYTHON="${PYTHON:-python3}"
command -v "$PYTHON" >/dev/null || { echo "[setup] ERROR: $PYTHON not found: install Python >= 3.11" >&2; exit 1; }
"$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
  || { echo "[setup] ERROR: infer-top needs Python >= 3.11 (found $("$PYTHON" -V))" >&2; exit 1; }
if [ ! -x .venv/bin/python ]; then
  if ! "$PYTHON" -m venv .venv 2>/dev/null; then
    echo "[setup] python3-venv missing: installing it with apt-get" >&2
    rm -rf .venv
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null \
      || { echo "[setup] ERROR: could not install python3-venv (run: apt-get install python3-venv)" >&2; exit 1; }
    "$PYTHON" -m venv .venv
  fi
fi
# Re-install only when pyproject.toml changed since the last install.
stamp=".venv/.infer-top-installed-${extras:-base}"
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  echo "[setup] installing infer-top${extras:+[$extras]} into .venv" >&2
  .venv/bin/python -m pip install -q --upgrade pip >/dev/null 2>&1 || true
  .venv/bin/python -m pip install -q -e ".${extras:+[$extras]}"
  touch "$stamp"
fi
