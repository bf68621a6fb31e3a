"""``infer-top sim`` as a user runs it: a real process on a real port."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager

CLI = [sys.executable, "-m", "tui.cli", "sim"]


@contextmanager
def serving(*args: str) -> Iterator[tuple[subprocess.Popen[str], str]]:
    proc = subprocess.Popen(
        [*CLI, "--port", "0", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        banner = proc.stdout.readline()
        match = re.search(r"on (http://127\.0\.0\.1:\d+)", banner)
        assert match, f"no URL in {banner!r}; stderr: {proc.stderr.read() if proc.stderr else ''}"
        assert banner.startswith("SIMULATED")
        yield proc, match.group(1)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
        proc.wait(timeout=10)
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()


def post(url: str, body: bytes) -> int:
    req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        r.read()
        return int(r.status)


def test_list_names_the_profiles() -> None:
    out = subprocess.run([*CLI, "--list"], capture_output=True, text=True, check=True).stdout
    assert "h100-llama2-7b-vllm" in out and "orin-llama3.2-3b-llamacpp" in out


def test_bad_arguments_fail_clearly() -> None:
    bad = subprocess.run([*CLI, "--profile", "nope"], capture_output=True, text=True)
    assert bad.returncode == 2 and "no simulator profile 'nope'" in bad.stderr
    rate = subprocess.run(
        [*CLI, "--profile", "h100-llama2-7b-vllm", "--fault-error-rate", "2"],
        capture_output=True,
        text=True,
    )
    assert rate.returncode == 2 and "error_rate" in rate.stderr


def test_serves_until_interrupted() -> None:
    with serving("--profile", "h100-llama2-7b-sglang", "--time-scale", "0.02") as (proc, url):
        with urllib.request.urlopen(url + "/v1/models", timeout=10) as r:
            assert b"infer-top-sim" in r.read()
        body = b'{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}'
        assert post(url + "/v1/chat/completions", body) == 200
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=10) == 0


def test_crash_fault_ends_the_process() -> None:
    args = ("--profile", "h100-llama2-7b-vllm", "--time-scale", "0.02", "--fault-crash-after", "1")
    with serving(*args) as (proc, url):
        body = b'{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}'
        assert post(url + "/v1/chat/completions", body) == 200
        try:
            post(url + "/v1/chat/completions", body)
        except (urllib.error.URLError, ConnectionError):
            pass
        assert proc.wait(timeout=10) == 70


def test_calibrate_prints_the_seed_figure() -> None:
    out = subprocess.run(
        [*CLI, "--profile", "h100-llama2-7b-llamacpp", "--calibrate", "8,64"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    rows = [line.split() for line in out.splitlines() if line and line[0] == " "]
    by_level = {int(r[0]): (float(r[1]), int(r[3])) for r in rows}
    assert abs(by_level[64][0] - 431) / 431 < 0.10
    assert by_level[8][1] == 0 and by_level[64][1] > 0  # failures only past the slots
