"""What Swarm says of the services infer-top deployed: the replicas each is asked for and
the nodes its running tasks are on (a manager's agent lists them with ``engine ls``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agents.runtime.swarm_stack import LABEL_RUNTIME


@dataclass(frozen=True)
class ServiceTasks:
    """One service as Swarm has it: replicas asked for, and where tasks run now."""

    replicas: int
    nodes: tuple[str, ...]
    """The host name of the node of each running task."""


def service_tasks(docker: Any) -> dict[str, ServiceTasks]:
    """Swarm's infer-top services by name, from a manager's Docker client (blocking:
    three Docker API calls; Docker's error on a node that is no manager)."""
    hosts = {n.id: n.attrs["Description"]["Hostname"] for n in docker.nodes.list()}
    services = docker.services.list(filters={"label": f"{LABEL_RUNTIME}=swarm"})
    nodes: dict[str, list[str]] = {s.id: [] for s in services}
    for task in docker.api.tasks(filters={"desired-state": "running"}):
        if task.get("ServiceID") in nodes and task["Status"]["State"] == "running":
            nodes[task["ServiceID"]].append(hosts.get(task["NodeID"], task["NodeID"]))
    return {
        s.name: ServiceTasks(
            replicas=int(s.attrs["Spec"]["Mode"].get("Replicated", {}).get("Replicas", 0)),
            nodes=tuple(sorted(nodes[s.id])),
        )
        for s in services
    }
