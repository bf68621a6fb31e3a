"""The two console scripts: help, version, and the TUI as the default command."""

from __future__ import annotations

import pytest

from agents.cli import main as agent_main
from tui.cli import main


@pytest.mark.parametrize("entry", [main, agent_main])
def test_version(entry: object, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        entry(["--version"])  # type: ignore[operator]
    assert exit_info.value.code == 0
    assert "0.1.0" in capsys.readouterr().out


def test_help_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    for command in ("tui", "demo", "bench", "engine", "sim", "runs", "alerts", "config"):
        assert f"    {command} " in out, command


def test_options_without_a_command_go_to_the_tui(capsys: pytest.CaptureFixture[str]) -> None:
    # `infer-top --config F` must mean `infer-top tui --config F`: the TUI's own
    # config check answers, not argparse's "invalid choice".
    assert main(["--config", "/nonexistent/infer-top.toml"]) == 2
    err = capsys.readouterr().err
    assert "config file /nonexistent/infer-top.toml does not exist" in err
