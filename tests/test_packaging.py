"""A plain (non-editable) ``pip install .`` gives working CLIs and finds the
Compose files from any directory."""

from __future__ import annotations

import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_pip_install_into_fresh_venv(tmp_path: Path) -> None:
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    py = env_dir / "bin" / "python"
    subprocess.run(
        [str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check", str(ROOT)],
        check=True,
        timeout=600,
        capture_output=True,
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
        ).stdout
        assert f"usage: {cli}" in help_out
    found = subprocess.run(
        [
            str(py),
            "-c",
            "import compose,sys; p=compose.compose_file('llama-server-cpu'); "
            "print(p); sys.exit(0 if p.is_file() and 'site-packages' in str(p) else 1)",
        ],
        cwd=elsewhere,
        capture_output=True,
        text=True,
    )
    assert found.returncode == 0, found.stdout + found.stderr
    assert sys.prefix not in found.stdout
