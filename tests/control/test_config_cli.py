"""``infer-top config init`` and ``infer-top config show`` as a user runs them."""

from __future__ import annotations

import dataclasses
import os
import stat
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from alerts import AlertConfig
from alerts.config import DEFAULT_RULES
from control.config import Config, load_config, parse_config
from control.config_file import COST_EXAMPLE, PROFILES_EXAMPLE
from tui.cli import main

ROOT = Path(__file__).parents[2]


@pytest.fixture
def xdg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A home without a config: the path ``config init`` writes by default."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.delenv("INFER_TOP_CONFIG", raising=False)
    monkeypatch.delenv("INFER_TOP_DB", raising=False)
    return tmp_path / "xdg" / "infer-top" / "config.toml"


def _infer_top(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tui.cli", *argv],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env=os.environ.copy(),
    )


def _uncommented(block: str) -> str:
    """An example block's settings: its lines after the first bare ``#``, uncommented."""
    lines = block.splitlines()
    return "\n".join(line.removeprefix("# ") for line in lines[lines.index("#") + 1 :])


def test_config_init_writes_an_owner_only_commented_file_that_reads_back_as_the_defaults(
    xdg: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["config", "init"]) == 0
    assert f"wrote {xdg} (mode 0600)" in capsys.readouterr().out
    assert stat.S_IMODE(xdg.stat().st_mode) == 0o600
    text = xdg.read_text()
    # Every rule with its comment, the nodes' keys, the screen and the store.
    for name, rule in DEFAULT_RULES.items():
        assert f"[alerts.rules.{name}]\n# {rule.title}: {rule.doc}\n" in text
    for key in ("name", "url", "token_file", "transport", "ssh", "ssh_config", "ca", "fingerprint"):
        assert f"# {key} = " in text or f"# # {key} = " in text, key
    assert "[ui]\nrefresh_s = 0.125" in text and "[store]\n# path = " in text
    assert "[alerts.hooks.critical]" in text and "# webhook = " in text
    # the commented [cost] and [load.profiles] examples are settings that parse as written
    examples = [COST_EXAMPLE, PROFILES_EXAMPLE]
    assert all(block in text for block in examples)
    uncommented = parse_config("\n".join(_uncommented(block) for block in examples))
    assert uncommented.prices.node_hourly == {"h100-a": 19.9}
    assert uncommented.prices.node_gpu == {"h100-b": "H100"}
    assert [p.name for p in uncommented.load_profiles] == ["long-prompts"]

    config = load_config()
    assert config.source == xdg
    # Every field, so a setting added to Config must be written with its default too.
    assert dataclasses.replace(config, source=None) == Config()
    assert config.embedded  # no node: the TUI serves this machine, as with no file


def test_config_init_refuses_to_overwrite_unless_forced(
    xdg: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    xdg.parent.mkdir(parents=True)
    xdg.write_text('[[nodes]]\nname = "mine"\nurl = "http://10.0.0.5:7070"\n')
    xdg.chmod(0o644)
    assert main(["config", "init"]) == 2
    err = capsys.readouterr().err
    assert f"{xdg} already exists; nothing written" in err and "--force" in err
    assert "mine" in xdg.read_text()

    assert main(["config", "init", "--force"]) == 0
    assert "mine" not in xdg.read_text()
    assert stat.S_IMODE(xdg.stat().st_mode) == 0o600
    other = xdg.parent / "elsewhere" / "lab.toml"
    assert main(["config", "init", "--config", str(other)]) == 0
    assert parse_config(other.read_text()).alerts == AlertConfig()


def test_config_show_prints_the_config_in_force_its_file_and_masks_secrets(
    xdg: Path, tmp_path: Path
) -> None:
    config_file = tmp_path / "lab.toml"
    config_file.write_text(
        "[[nodes]]\n"
        'name = "h100-a"\n'
        'url = "https://10.0.0.5:7443"\n'
        'token_file = "h100-a.token"\n'
        "[alerts.rules.kv_cache_full]\n"
        "threshold = 0.8\n"
        "[alerts.hooks.warning]\n"
        'webhook = "https://chat.example/hooks/T0123/SECRETPATH?key=SECRETQUERY"\n'
        "[alerts.hooks.critical]\n"
        'command = ["/usr/local/bin/page", "--token", "SECRETARG", "--api-key=SECRETKEY"]\n'
        '[cost]\ncurrency = "EUR"\nkwh = 0.3\n[cost.gpu_hourly]\nH100 = 2.5\n'
        '[cost.nodes]\nh100-a = 19.9\nh100-b = "H100"\n'
        "[load.profiles.long-prompts]\nconcurrency = [1, 4]\ninput_len = 2048\n"
    )
    config_file.chmod(0o600)
    done = _infer_top("config", "show", "--config", str(config_file))
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert out.startswith(f"# effective config, read from {config_file}\n")
    assert "SECRET" not in out
    assert 'webhook = "https://chat.example/***"' in out
    assert 'command = ["/usr/local/bin/page", "--token", "***", "--api-key=***"]' in out
    shown = parse_config(out, source=config_file)
    read = load_config(config_file)
    assert shown.nodes == read.nodes  # the token file's path, never its content
    assert shown.db_path == read.db_path and shown.refresh_s == read.refresh_s
    assert shown.alerts.rules == read.alerts.rules  # every rule, defaults included
    assert shown.alerts.rule("kv_cache_full").threshold == 0.8
    assert shown.prices == read.prices and shown.prices.kwh == 0.3
    assert shown.load_profiles == read.load_profiles and read.load_profiles[0].input_len == 2048
    assert "[alerts.rules.gpu_temperature]" in out  # a default is shown too

    config_file.chmod(0o644)
    done = _infer_top("config", "show", "--config", str(config_file))
    assert f"{config_file} is readable by others" in done.stderr
    assert f"chmod 600 {config_file}" in done.stderr


def test_config_show_without_a_file_says_so_and_prints_the_defaults(
    xdg: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    done = _infer_top("config", "show")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"# no config file ({xdg} does not exist): infer-top's defaults")
    assert "embedded agent on this machine" in done.stdout
    assert "`infer-top config init`" in done.stdout
    assert tomllib.loads(done.stdout)["ui"]["refresh_s"] == 0.125
    assert parse_config(done.stdout).alerts == AlertConfig()

    monkeypatch.setenv("INFER_TOP_DB", str(xdg.parent / "elsewhere.db"))
    done = _infer_top("config", "show")
    assert f'path = "{xdg.parent / "elsewhere.db"}"   # from $INFER_TOP_DB' in done.stdout

    missing = _infer_top("config", "show", "--config", str(xdg.parent / "nope.toml"))
    assert missing.returncode == 2
    assert "nope.toml does not exist" in missing.stderr
