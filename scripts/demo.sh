#!/usr/bin/env bash
# README quick start #1: set up .venv and open the demo (replayed H200
# telemetry and simulated engines; no Docker, no GPU needed).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
scripts/setup.sh
exec .venv/bin/infer-top demo "$@"
