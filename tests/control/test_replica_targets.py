"""The Load screen's "all replicas of a service" targets: a Swarm engine healthy on more
than one node, read from the fleet's frames (the engines each node's agent lists)."""

from __future__ import annotations

from control.loads import replica_targets
from telemetry import EngineTelemetry

URL = "http://127.0.0.1:18080"


def replica(engine_id: str, *, runtime: str = "swarm", health: str = "healthy") -> EngineTelemetry:
    return EngineTelemetry(
        engine_id, "llamacpp", "ready", health, url=URL, runtime=runtime
    )  # fmt: skip


def test_a_service_healthy_on_several_nodes_is_one_target_naming_them() -> None:
    engines = [
        ("b", replica("svc1")),
        ("a", replica("svc1")),
        ("c", replica("svc1", health="loading")),  # not yet a replica to load
        ("a", replica("svc2")),  # one replica: its node's own target says it
        ("a", replica("cmp1", runtime="compose")),
        ("b", replica("cmp1", runtime="compose")),  # one id on two nodes, no service
    ]
    assert replica_targets(engines) == {"replicas/svc1": ("a", "b")}
