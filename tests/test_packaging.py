"""A plain (non-editable) ``pip install .`` gives working CLIs and finds the
Compose files and the replayed H200 recording from any directory."""

from __future__ import annotations

import os
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# The installed copy must answer, not a source tree a PYTHONPATH points at.
INSTALLED_ONLY = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


def test_pip_install_into_fresh_venv(tmp_path: Path) -> None:
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    py = env_dir / "bin" / "python"
    subprocess.run(
        [str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check", str(ROOT)],
        check=True,
        timeout=600,
        capture_output=True,
        env=INSTALLED_ONLY,
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for cli in ("infer-top", "infer-agent"):
        help_out = subprocess.run(
            [str(env_dir / "bin" / cli), "--help"],
            cwd=elsewhere,
            capture_output=True,
            text=True,
            check=True,
            env=INSTALLED_ONLY,
        ).stdout
        assert f"usage: {cli}" in help_out
    for lookup in (
        "import compose; p = compose.compose_file('llama-server-cpu')",
        "from agents.config import bundled_trace; p = bundled_trace()",
    ):
        found = subprocess.run(
            [
                str(py),
                "-c",
                f"import sys; {lookup}; "
                "print(p); sys.exit(0 if p.is_file() and 'site-packages' in str(p) else 1)",
            ],
            cwd=elsewhere,
            capture_output=True,
            text=True,
            env=INSTALLED_ONLY,
        )
        assert found.returncode == 0, found.stdout + found.stderr
        assert sys.prefix not in found.stdout
