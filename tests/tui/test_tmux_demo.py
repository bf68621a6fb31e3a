"""``infer-top demo`` in a real terminal (tmux), driven by keys as a person would."""

from __future__ import annotations

import sys
from pathlib import Path

from tests.tui.tmux import Tmux


def test_demo_every_screen_by_key(tmux: Tmux, tmp_path: Path) -> None:
    exe = Path(sys.executable).with_name("infer-top")
    env = " ".join(
        f"{k}={tmp_path / k.lower()}"
        for k in ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME")
    )
    # the shell stays after the demo exits, so its last screen can be read
    # COLUMNS / LINES from the test runner would override the pane's real size
    tmux.start(
        f"cd {tmp_path} && env -u COLUMNS -u LINES {env} TERM=xterm-256color "
        f"{exe} demo --gpus 4; "
        "echo DEMO-EXITED $?; sleep 30"
    )
    screen = tmux.wait_for("1 Fleet", "h200-demo", "replayed H200", "SIMULATED")
    assert "GPUs" in screen and "Engines" in screen
    # the engine table's Health and Runtime columns: simulated engines, up
    tmux.wait_for("vllm", "trtllm", "healthy    sim")

    tmux.keys("2")
    tmux.wait_for("Node h200-demo", "GPU util %", "power W")
    tmux.keys("3")
    tmux.wait_for("Launch", "Runtime", "Start s")
    tmux.keys("4")
    # A healthy target is picked at once, so its node's replayed GPUs show beside.
    tmux.wait_for("Target", "Profile", "Run (r)", "GPUs of h200-demo", "in flight")
    tmux.keys("6")
    tmux.wait_for("Stored runs", "trtllm SIM", "completed")

    tmux.keys("5")
    screen = tmux.wait_for(
        "throughput vs concurrency",
        "TTFT p50 vs concurrency",
        "trtllm simulated",
        "llamacpp simulated",
        # the table fills after the charts' legends on a busy machine: wait for its rows
        "fail %",
        "@64",
    )
    table = [line for line in screen.splitlines() if "simulated" in line and "@" not in line]
    rows = {
        line.split()[0]: line
        for line in table
        if line.split()[0] in ("trtllm", "lmdeploy", "vllm", "ollama", "llamacpp")
    }
    assert set(rows) == {"trtllm", "lmdeploy", "vllm", "ollama", "llamacpp"}, screen
    # the seed's ranking at 64 concurrent: TensorRT-LLM > LMDeploy > vLLM > Ollama > llama.cpp
    assert "@64" in screen
    tok_s_at_64 = {k: int(v.split()[8].replace(",", "")) for k, v in rows.items()}
    ranked = sorted(tok_s_at_64, key=tok_s_at_64.__getitem__, reverse=True)
    assert ranked == ["trtllm", "lmdeploy", "vllm", "ollama", "llamacpp"], tok_s_at_64

    tmux.keys("?")
    tmux.wait_for("keys (as in nvitop / k9s)")
    tmux.keys("Escape")  # alone: ESC then a key at once would read as alt+key
    tmux.wait_gone("keys (as in nvitop / k9s)")
    tmux.keys("1")
    tmux.wait_for("Nodes", "h200-demo")
    tmux.keys("q")
    tmux.wait_for("DEMO-EXITED 0", timeout_s=30)
