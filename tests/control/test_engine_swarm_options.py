"""``infer-top engine start --runtime swarm``: the placement and replica options become
the start request's ``options``; given without the swarm runtime they are refused."""

from __future__ import annotations

import argparse

import pytest

from control.config import ConfigError
from control.engine_cli import register, start_options


def parsed(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    return parser.parse_args(["engine", "start", "llamacpp", "--model", "/models/tiny.gguf", *argv])


def test_placement_and_replicas_reach_the_start_options() -> None:
    args = parsed("--runtime", "swarm", "--place-node", "gpu-b", "--place-label", "pool=h100",
                  "--replicas", "2")  # fmt: skip
    assert start_options(args) == {
        "placement": {"node": "gpu-b", "label": "pool=h100"},
        "replicas": 2,
    }
    assert start_options(parsed("--runtime", "swarm")) is None


def test_swarm_options_without_the_swarm_runtime_are_refused() -> None:
    with pytest.raises(ConfigError, match="go with --runtime swarm"):
        start_options(parsed("--place-node", "gpu-b"))
    with pytest.raises(ConfigError, match="go with --runtime swarm"):
        start_options(parsed("--runtime", "compose", "--replicas", "2"))
