"""``infer-top node add/remove`` without a node: the operator's config edited in place (the
rest of the file kept), the node's report and refusals in words, a rebuilt wheel recognised
as the same code (tests/fleet/test_node_add.py runs the whole thing against a real sshd)."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from control.config import ConfigError, NodeConfig, load_config, parse_config
from control.config_edit import drop_node, put_node, ssh_node_entry
from control.node_setup import NodeSetupError, check_node, target_of, wheel_digest

HEAD = '# my lab\n[[nodes]]\nname = "h100"\nurl = "https://10.0.0.5:7443"  # pinned below\n\n'
TAIL = "[alerts.rules.kv_cache_full]\nthreshold = 0.8\n"
PROBE: dict[str, object] = {
    "python": "3.11.2",
    "python_ok": True,
    "venv": True,
    "machine": "aarch64",
    "libc": "glibc",
    "libc_version": "2.35",
    "docker": None,
    "compose": None,
    "nvml": None,
    "jetson": True,
}


def _entry(tmp_path: Path, destination: str) -> str:
    node = NodeConfig(
        name="jetson",
        url="http://127.0.0.1:7070",
        token_file=tmp_path / "jetson.token",
        transport="ssh",
        ssh=destination,
        ssh_config=tmp_path / "ssh config",
        prefix="/srv/infer agent",
    )
    return ssh_node_entry(node)


def test_a_node_is_added_replaced_and_dropped_with_the_rest_of_the_file_kept(
    tmp_path: Path,
) -> None:
    config = tmp_path / "config.toml"
    config.write_text(HEAD + TAIL)
    config.chmod(0o640)

    put_node(config, _entry(tmp_path, "jetson"), "jetson")
    text = config.read_text()
    assert text.startswith(HEAD + TAIL) and config.stat().st_mode & 0o777 == 0o640
    (h100, jetson) = load_config(config).nodes
    assert h100.name == "h100"
    assert (jetson.transport, jetson.ssh, jetson.ssh_config) == (
        "ssh",
        "jetson",
        tmp_path / "ssh config",
    )
    assert jetson.prefix == "/srv/infer agent"  # node remove finds the agent there

    put_node(config, _entry(tmp_path, "ops@10.20.0.7"), "jetson")
    assert config.read_text().count('name = "jetson"') == 1
    assert load_config(config).nodes[1].ssh == "ops@10.20.0.7"

    assert drop_node(config, "jetson") is True
    assert config.read_text() == HEAD + TAIL
    assert drop_node(config, "jetson") is False


def test_a_new_config_file_is_owner_only(tmp_path: Path) -> None:
    config = tmp_path / "infer-top" / "config.toml"
    put_node(config, _entry(tmp_path, "jetson"), "jetson")
    assert config.stat().st_mode & 0o777 == 0o600
    assert [n.name for n in load_config(config).nodes] == ["jetson"]


def test_the_node_report_refuses_only_what_the_agent_needs() -> None:
    said: list[str] = []
    check_node(PROBE, said.append)
    assert any("GPU: Jetson" in line for line in said)
    assert any("native engines only" in line for line in said)  # no Docker: reported
    with pytest.raises(
        NodeSetupError, match=r"python3 is 3\.9\.2; the agent needs Python >= 3\.11"
    ):
        check_node({**PROBE, "python": "3.9.2", "python_ok": False}, said.append)
    with pytest.raises(NodeSetupError, match="install python3-venv"):
        check_node({**PROBE, "venv": False}, said.append)
    key, options = target_of(PROBE)
    assert key == "cp311-manylinux_2_35_aarch64"
    assert "manylinux2014_aarch64" in options and "--only-binary=:all:" in options


def test_a_rebuilt_wheel_of_the_same_code_has_the_same_digest(tmp_path: Path) -> None:
    def wheel(name: str, year: int, body: bytes) -> Path:
        path = tmp_path / name
        with zipfile.ZipFile(path, "w") as archive:
            archive.writestr(zipfile.ZipInfo("agents/cli.py", (year, 1, 1, 0, 0, 0)), body)
        return path

    same = wheel("a.whl", 2020, b"print(1)"), wheel("b.whl", 2026, b"print(1)")
    assert wheel_digest(same[0]) == wheel_digest(same[1])
    assert wheel_digest(wheel("c.whl", 2020, b"print(2)")) != wheel_digest(same[0])


def test_only_an_ssh_node_records_where_node_add_installed_its_agent() -> None:
    entry = '[[nodes]]\nname = "a"\nurl = "http://10.0.0.5:7070"\nprefix = "/opt/x"\n'
    with pytest.raises(ConfigError, match="only an ssh node has one"):
        parse_config(entry)
