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
  # Debian's venv without ensurepip prints a long "apt install python3.11-venv"
  # advice on stdout; we act on it below, so keep it off the screen.
  if ! "$PYTHON" -m venv .venv >/dev/null 2>&1; then
    echo "[setup] python3-venv missing: installing it with apt-get" >&2
    rm -rf .venv
    # NEEDRESTART_SUSPEND: never let an apt hook restart this machine's services.
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive DEBCONF_NOWARNINGS=yes NEEDRESTART_SUSPEND=1 \
      apt-get install -y -qq python3-venv >/dev/null \
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
