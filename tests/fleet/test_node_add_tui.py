"""``node add`` from the TUI (Fleet screen, ``a``) against a real sshd node (tests/netns.py):
the form's fields, each step's progress line while the worker installs the agent from this
checkout's wheel (going on when the form is closed), then the node joins the running fleet
and its telemetry shows through the ssh transport, and the operator's config has it (with
where it went). The CLI flow itself is tests/fleet/test_node_add.py's; the node shares this
machine's filesystem, so everything goes under a test-made prefix, and ``node remove``
cleans it up afterwards."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from textual.widgets import Log

from control.config import load_config
from control.model import NodeStatus
from control.wiring import build_services
from tests.conftest import IN_CI
from tests.fleet.test_node_add import WHEEL_CACHE
from tests.netns import SshRig, TestNode, network_nodes, sshd_reason
from tests.tui.conftest import SIZE
from tests.tui.helpers import type_into, wait_until
from tui.app import create_app
from tui.cli import main
from tui.node_add import NodeAddForm

pytestmark = pytest.mark.netns

PORT = 7072  # the rig's own agent has 7070 on the node's loopback
OTHER = '[[nodes]]\nname = "other"\nurl = "http://127.0.0.1:9"\n'


@pytest.fixture(scope="module")
def tlab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestNode]:
    if reason := sshd_reason():
        if IN_CI:
            pytest.fail(f"CI=true and the ssh tests cannot run: {reason}", pytrace=False)
        pytest.skip(reason)
    workdir = tmp_path_factory.mktemp("nodeaddtui")
    with network_nodes(("tlab",), workdir, natives={}, ssh=("tlab",)) as nodes:
        yield nodes["tlab"]


def _progress(form: NodeAddForm) -> str:
    return "\n".join(str(line) for line in form.query_one("#na-progress", Log).lines)


async def test_the_fleet_screen_adds_a_node_over_ssh_and_shows_it_live(
    tlab: TestNode, tmp_path: Path
) -> None:
    rig = SshRig.at(tlab.token_file.parent)
    prefix, config_file = tmp_path / "node-prefix", tmp_path / "operator" / "config.toml"
    config_file.parent.mkdir()
    config_file.write_text(OTHER)
    config = replace(load_config(config_file), db_path=tmp_path / "runs.db")
    try:
        async with build_services(config) as services:
            app = create_app(config, services=services)
            async with app.run_test(size=SIZE) as pilot:
                await pilot.press("a")
                await wait_until(pilot, lambda: isinstance(app.screen, NodeAddForm), "the form")
                form = app.screen
                assert isinstance(form, NodeAddForm)
                for key, value in (
                    ("name", "tlab2"),
                    ("ssh", "tlab"),
                    ("ssh-config", str(rig.config_file)),
                    ("port", str(PORT)),
                    ("prefix", str(prefix)),
                    ("agent-args", "--interval=500ms"),
                    ("wheel-cache", str(WHEEL_CACHE)),
                ):
                    await type_into(pilot, f"#na-{key}", value)
                await pilot.click("#na-add")
                await wait_until(
                    pilot, lambda: "[4/6] installing" in _progress(form), "install progress", 240
                )
                assert "[1/6] checking tlab" in _progress(form)
                await pilot.press("escape")  # closed mid-install: the install goes on
                await wait_until(pilot, lambda: not isinstance(app.screen, NodeAddForm), "closed")
                await wait_until(
                    pilot, lambda: "tlab2" in app.model.nodes, "the node in the fleet", 240
                )
                node = app.model.nodes["tlab2"]
                await wait_until(
                    pilot, lambda: node.status is NodeStatus.OK, "tlab2's telemetry", 60
                )
                assert node.link == "ssh tlab: up"
                assert node.frame is not None and node.frame.node == "tlab2"
        added = next(n for n in load_config(config_file).nodes if n.name == "tlab2")
        assert (added.transport, added.ssh, added.prefix) == ("ssh", "tlab", str(prefix))
        assert config_file.read_text().startswith(OTHER)
    finally:
        if prefix.exists():  # the agent goes, whatever the test saw
            main(["node", "remove", "tlab2", "--prefix", str(prefix), "--config", str(config_file)])
    assert not prefix.exists()
