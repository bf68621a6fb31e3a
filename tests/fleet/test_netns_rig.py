"""The multi-host rig cleans up after itself: what a killed run left is removed before a new
rig is built, and a test that fails inside the rig leaves nothing behind."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.netns import BRIDGE, FORWARD_RULE, PREFIX, network_nodes

pytestmark = pytest.mark.netns


def leftovers() -> tuple[list[str], list[str], bool]:
    def out(*argv: str) -> str:
        return subprocess.run(argv, capture_output=True, text=True, timeout=30).stdout

    namespaces = [n for n in out("ip", "netns", "list").split() if n.startswith(f"{PREFIX}-")]
    links = [w for w in out("ip", "-o", "link", "show").split() if w.startswith(f"{PREFIX}-")]
    rule = subprocess.run(["iptables", "-C", *FORWARD_RULE], capture_output=True, timeout=30)
    return namespaces, links, rule.returncode == 0


def test_a_killed_runs_leftovers_go_and_a_failing_test_leaves_nothing(tmp_path: Path) -> None:
    # What a killed run leaves: a namespace, a bridge, the FORWARD rule.
    for argv in (
        ["ip", "netns", "add", f"{PREFIX}-stale"],
        ["ip", "link", "add", BRIDGE, "type", "bridge"],
        ["iptables", "-I", *FORWARD_RULE],
    ):
        subprocess.run(argv, check=True, capture_output=True, timeout=30)
    with pytest.raises(RuntimeError, match="the test failed"):
        with network_nodes(("x",), tmp_path, natives={}) as nodes:
            namespaces, _links, rule = leftovers()
            assert namespaces == [f"{PREFIX}-x"] and rule  # the stale namespace is gone
            assert nodes["x"].process is not None and nodes["x"].process.poll() is None
            raise RuntimeError("the test failed")
    assert leftovers() == ([], [], False)
    assert nodes["x"].process.poll() is not None  # the node's agent is gone too
