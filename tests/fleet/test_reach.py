"""How the control plane reaches an engine: through the agent's proxy unless the agent is
on this machine's loopback; and the bench's two ways of naming an engine."""

from __future__ import annotations

from pathlib import Path

import pytest

from control.loads import path_label
from control.reach import engine_route
from tui.cli import main


def test_an_agent_on_another_machine_means_the_proxy_with_the_agents_token() -> None:
    remote = engine_route("http://198.18.0.12:7070/", "agent-token", "e1", "http://127.0.0.1:8080")
    assert (remote.url, remote.api_key, remote.path) == (
        "http://198.18.0.12:7070/v1/engines/e1/proxy/v1",
        "agent-token",
        "proxied",
    )
    assert "agent-token" not in repr(remote)
    for local in ("http://127.0.0.1:7070", "http://localhost:7070", "http://[::1]:7070"):
        route = engine_route(local, "agent-token", "e1", "http://127.0.0.1:8080")
        assert (route.url, route.api_key, route.path) == ("http://127.0.0.1:8080", None, "direct")
    # an ssh tunnel's port is on this machine's loopback; the agent and its engine are not
    tunnelled = engine_route(
        "http://127.0.0.1:40111", "agent-token", "e1", "http://127.0.0.1:8080", tunnelled=True
    )
    assert (tunnelled.url, tunnelled.path) == (
        "http://127.0.0.1:40111/v1/engines/e1/proxy/v1",
        "proxied",
    )


def test_bench_wants_a_url_or_a_node_and_an_engine(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "config.toml"
    config.write_text('[[nodes]]\nname = "a"\nurl = "http://198.18.0.11:7070"\n')
    for argv in (
        ["bench", "--model", "m"],
        ["bench", "--url", "http://127.0.0.1:9", "--node", "a", "--engine-id", "e"],
        ["bench", "--node", "a"],
    ):
        assert main(argv) == 2, argv
        assert "--url, or by --node and --engine-id" in capsys.readouterr().err
    assert main(["bench", "--config", str(config), "--node", "b", "--engine-id", "e"]) == 2
    assert "no node 'b'" in capsys.readouterr().err


def test_the_load_screen_says_which_path_a_run_took() -> None:
    from loadgen.profiles import LoadSpec, concurrency_sweep
    from loadgen.runner import Target
    from loadgen.setup import describe_run
    from loadgen.workload import Workload

    spec, workload = LoadSpec(concurrency_sweep([1]), 4), Workload()
    target = Target("http://198.18.0.12:7070/v1/engines/e1/proxy/v1", "m", "llamacpp")
    proxied = describe_run(spec, workload, target, origin="tui", node="b", path="proxied")
    assert path_label(proxied) == (
        "load from control-plane → engine on b, through its agent's proxy (proxied)"
    )
    direct = describe_run(spec, workload, Target("http://127.0.0.1:8080", "m"), origin="tui")
    assert (
        path_label(direct) == "load from control-plane → engine at http://127.0.0.1:8080 (direct)"
    )
    local = describe_run(
        spec, workload, target, origin="bench", node="b", load_node="b", path="node-local"
    )
    assert path_label(local) == "load from b, next to its engine (node-local)"
