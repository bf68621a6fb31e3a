"""Charts as PNG for slides that take no SVG: the report's SVG drawn by a headless
Chromium (the one the operator has; nothing is downloaded).

Chromium refuses to run as root with its sandbox, so as root (a lab's bastion, a
container) it runs without it; the page it draws is our own SVG file, nothing fetched.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
_SIZE = re.compile(r'<svg[^>]*\bwidth="(\d+)"[^>]*\bheight="(\d+)"')


class ChartPngError(RuntimeError):
    """No PNG could be drawn (the message says what to install or what went wrong)."""


def find_browser() -> str:
    for name in BROWSERS:
        found = shutil.which(name)
        if found:
            return found
    raise ChartPngError(
        "--png needs a Chromium to draw the charts (apt-get install chromium, or Google "
        f"Chrome); none of {', '.join(BROWSERS)} is on PATH. The SVG files need nothing."
    )


def svg_to_png(svg: Path, png: Path, browser: str, timeout_s: float = 60.0) -> None:
    """Draw ``svg`` at its own size into ``png``."""
    size = _SIZE.search(svg.read_text(encoding="utf-8"))
    if size is None:
        raise ChartPngError(f"{svg} names no width and height")
    width, height = size.groups()
    with tempfile.TemporaryDirectory(prefix="infer-top-chromium-") as profile:
        argv = [
            browser,
            "--headless=new",
            "--disable-gpu",
            "--hide-scrollbars",
            f"--user-data-dir={profile}",
            f"--window-size={width},{height}",
            f"--screenshot={png}",
            svg.resolve().as_uri(),
        ]
        if os.geteuid() == 0:
            argv.insert(1, "--no-sandbox")
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise ChartPngError(f"{browser} drew no {png.name} within {timeout_s:g} s") from None
    if done.returncode != 0 or not png.exists():
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise ChartPngError(f"{browser} drew no {png.name} (exit {done.returncode}): {tail}")
