"""The operator's config file: nodes, tokens, refusals in words."""

from __future__ import annotations

from pathlib import Path

import pytest

from control.config import ConfigError, load_config, parse_config


def test_nodes_tokens_and_relative_paths(tmp_path: Path) -> None:
    token = tmp_path / "a.token"
    token.write_text("s3cret-token-value-123\n")
    token.chmod(0o600)
    cfg_file = tmp_path / "config.toml"
    cfg_file.write_text(
        '[[nodes]]\nname = "h100-a"\nurl = "https://10.0.0.5:7070/"\n'
        'token_file = "a.token"\n\n[ui]\nrefresh_s = 0.5\n'
    )
    config = load_config(cfg_file)
    (node,) = config.nodes
    assert (node.name, node.url, node.token_file) == ("h100-a", "https://10.0.0.5:7070", token)
    assert node.read_token() == "s3cret-token-value-123"
    assert config.refresh_s == 0.5 and not config.embedded


def test_no_file_means_the_embedded_agent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("INFER_TOP_CONFIG", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    monkeypatch.setenv("INFER_TOP_DB", str(tmp_path / "x.db"))
    config = load_config()
    assert config.embedded and config.nodes == ()
    assert config.db_path == tmp_path / "x.db"


def test_env_names_the_file_and_a_missing_one_is_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("INFER_TOP_CONFIG", str(tmp_path / "nope.toml"))
    with pytest.raises(ConfigError, match="does not exist"):
        load_config()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[[nodes]\n", "not valid TOML"),
        ('nodes = "x"\n', "array of tables"),
        ('[[nodes]]\nurl = "http://a:1"\n', "'name' must be"),
        ('[[nodes]]\nname = "a"\nurl = "ftp://a"\n', "http:// or https://"),
        (
            '[[nodes]]\nname = "a"\nurl = "http://a:1"\n[[nodes]]\nname = "a"\nurl = "http://b:1"\n',
            "repeated: a",
        ),
        ("[ui]\nrefresh_s = 0\n", "out of range"),
    ],
)
def test_bad_config_is_refused_in_words(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_config(text)


def test_token_file_others_can_read_is_refused(tmp_path: Path) -> None:
    token = tmp_path / "t"
    token.write_text("s3cret-token-value-123\n")
    token.chmod(0o644)
    (node,) = parse_config(
        f'[[nodes]]\nname = "a"\nurl = "http://a:1"\ntoken_file = "{token}"\n'
    ).nodes
    with pytest.raises(ConfigError, match="chmod 600"):
        node.read_token()
    token.unlink()
    with pytest.raises(ConfigError, match="cannot read token file"):
        node.read_token()


def test_cli_refuses_a_bad_config_in_words(tmp_path: Path) -> None:
    import subprocess
    import sys

    bad = tmp_path / "config.toml"
    bad.write_text('[[nodes]]\nname = "x"\nurl = "ftp://x"\n')
    exe = Path(sys.executable).with_name("infer-top")
    out = subprocess.run(
        [str(exe), "tui", "--config", str(bad)], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 2
    assert "http:// or https://" in out.stderr


def test_an_ssh_node_and_a_pinned_node_and_their_refusals(tmp_path: Path) -> None:
    config = parse_config(
        '[[nodes]]\nname = "jetson"\ntransport = "ssh"\nssh = "lab-jetson"\n'
        'ssh_config = "ssh_config"\n'
        '[[nodes]]\nname = "h100"\nurl = "https://10.0.0.5:7443"\n'
        f'fingerprint = "SHA256:{"AB:" * 31}AB"\n',
        source=tmp_path / "config.toml",
    )
    jetson, h100 = config.nodes
    assert (jetson.transport, jetson.ssh, jetson.url) == (
        "ssh",
        "lab-jetson",
        "http://127.0.0.1:7070",
    )
    assert jetson.ssh_config == tmp_path / "ssh_config"
    assert (h100.transport, h100.fingerprint) == ("http", "sha256:" + "ab" * 32)
    refusals = {
        'transport = "ssh"': "needs 'ssh'",
        'transport = "ssh"\nssh = "-oProxyCommand=sh"': "is not an ssh destination",
        'transport = "telnet"': "'transport' must be",
        'url = "http://h:7070"\nssh = "lab"': "'transport' is not",
        'url = "https://h:7443"\nfingerprint = "ab12"': "64 hex digits",
        'url = "https://h:7443"\nfingerprint = "sha256:'
        + "ab" * 32
        + '"\nca = "ca.pem"': "not both",
    }
    for lines, words in refusals.items():
        with pytest.raises(ConfigError, match=words):
            parse_config(f'[[nodes]]\nname = "n"\n{lines}\n')
