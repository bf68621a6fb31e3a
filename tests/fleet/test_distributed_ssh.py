"""A distributed run over nodes that only ssh reaches (``infer-top bench --node sb
--engine-id ID --load-nodes sa,sb``): both agents listen on their own node's loopback behind
a real sshd, so sa's share reaches sb's agent back through sa's own ssh connection (a remote
forward to sb's tunnel here); every record is stored under the one run, tagged with its
node. A load node reached by URL is refused before anything runs: it could not reach sb."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from agents.protocol import EngineInfo
from control.config import NodeConfig, load_config
from control.transport import connected
from store import open_store
from tests.conftest import IN_CI, Rig
from tests.loadgen.conftest import bench
from tests.netns import SshRig, TestNode, network_nodes, sshd_reason

pytestmark = [pytest.mark.netns, pytest.mark.docker]  # docker: the rig's llama-server and model

REQUESTS = 6
ELSEWHERE = '[[nodes]]\nname = "elsewhere"\nurl = "http://127.0.0.1:9"\ntoken_file = "{}"\n'


@pytest.fixture(scope="module")
def ssh_pair(rig: Rig, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, TestNode]]:
    if reason := sshd_reason():
        if IN_CI:
            pytest.fail(f"CI=true and the ssh tests cannot run: {reason}", pytrace=False)
        pytest.skip(reason)
    workdir = tmp_path_factory.mktemp("sshpair")
    natives = {"llamacpp": rig.llama_server_bin}
    model_dirs = (rig.tiny_model.resolve().parent,)
    with network_nodes(
        ("sa", "sb"), workdir, natives=natives, model_dirs=model_dirs, ssh=("sa", "sb")
    ) as nodes:
        yield nodes


def _config(path: Path, nodes: dict[str, TestNode]) -> Path:
    ssh_config = SshRig.at(nodes["sb"].token_file.parent).config_file
    path.write_text(
        "".join(
            f'[[nodes]]\nname = "{n.name}"\ntransport = "ssh"\nssh = "{n.name}"\n'
            f'ssh_config = "{ssh_config}"\ntoken_file = "{n.token_file}"\n'
            for n in nodes.values()
        )
        + ELSEWHERE.format(nodes["sa"].token_file)
    )
    return path


def _node(config: Path, name: str) -> NodeConfig:
    return next(n for n in load_config(config).nodes if n.name == name)


async def _start_llama(node: NodeConfig, rig: Rig) -> EngineInfo:
    launch = {
        "model": rig.tiny_model.resolve().name,
        "max_num_seqs": 4,
        "context_len": 2048,
        "extra_args": ["--threads=1"],
    }
    async with connected(node) as client:
        return await client.start("llamacpp", launch, runtime="process")


async def _stop(node: NodeConfig, engine_id: str) -> None:
    async with connected(node) as client:
        await client.stop(engine_id)


async def test_a_run_split_over_two_ssh_nodes_reaches_the_engine_back_through_ssh(
    ssh_pair: dict[str, TestNode], rig: Rig, tmp_path: Path
) -> None:
    config = _config(tmp_path / "config.toml", ssh_pair)
    sb = _node(config, "sb")
    # sa has no way to sb's agent but ssh: it listens on sb's own loopback
    probe = f"import socket; socket.create_connection(('{ssh_pair['sb'].address}', 7070), 2)"
    assert ssh_pair["sa"].run(sys.executable, "-c", probe, check=False).returncode != 0
    engine = await _start_llama(sb, rig)
    try:
        assert engine.health == "healthy", engine.message
        db, summary = tmp_path / "runs.db", tmp_path / "summary.json"
        common = ("--config", str(config), "--node", "sb", "--engine-id", engine.id)
        load = ["--concurrency", "2", "--requests", str(REQUESTS)]
        load += ["--input-len", "16", "--output-len", "8"]

        code, _out, err = await bench(*common, "--load-nodes", "elsewhere,sb", *load)
        assert code == 2, err
        assert "load node 'elsewhere' is reached by URL" in err and "ssh node" in err

        code, _out, err = await bench(
            *common, "--load-nodes", "sa,sb", *load,
            "--save", "--db", str(db), "--json", str(summary), timeout_s=240,
        )  # fmt: skip
        assert code == 0, err
    finally:
        await _stop(sb, engine.id)
    sent = json.loads(summary.read_text())["records_written"]
    with open_store(db) as store:
        [run] = store.list_runs()
        records = list(store.iter_requests(run.run_id))
    assert run.status == "completed", run.status_reason
    assert len(records) == sent == REQUESTS
    assert sorted(str(r.load_node) for r in records) == ["sa"] * 3 + ["sb"] * 3
    assert all(r.ok for r in records), [r.error_kind for r in records]
    shares = {s["node"]: s["path"] for s in run.profile["placement"]["load_nodes"]}
    assert shares == {"sa": "proxied", "sb": "node-local"}
