"""One duration syntax for every command: ``infer-top bench --duration`` and
``--slo``, ``infer-top runs prune --older-than`` and ``infer-agent --interval``
all read durations alike."""

from __future__ import annotations

import argparse

import pytest

from agents.cli import build_parser as agent_parser
from runs.units import DurationError, duration_arg, parse_duration_s
from tui.cli import build_parser


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("500ms", 0.5),
        ("30s", 30.0),
        (" 2m ", 120.0),
        ("1.5h", 5400.0),
        ("7d", 7 * 86400.0),
        ("2w", 14 * 86400.0),
        ("90", 90.0),
        (".25", 0.25),
        ("1.5 s", 1.5),
    ],
)
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration_s(text) == seconds


@pytest.mark.parametrize("text", ["", "a week", "-5s", "5 sec", "1.2.3", "5y", "ms"])
def test_nonsense_is_refused_saying_how_to_write_one(text: str) -> None:
    with pytest.raises(DurationError, match=r"not a duration.*write e\.g\. 500ms, 30s"):
        parse_duration_s(text)
    with pytest.raises(argparse.ArgumentTypeError, match="not a duration"):
        duration_arg(text)


def test_every_command_reads_the_same_durations() -> None:
    parser = build_parser()
    bench = parser.parse_args(
        ["bench", "--url", "http://127.0.0.1:1", "--model", "m", "--duration", "1d",
         "--stall-timeout", "500ms"]
    )  # fmt: skip
    assert (bench.duration, bench.stall_timeout) == (86400.0, 0.5)  # a soak test
    prune = parser.parse_args(["runs", "prune", "--older-than", ".5h"])
    assert prune.older_than == 1800.0
    assert parser.parse_args(["runs", "prune"]).older_than == 7 * 86400.0
    assert agent_parser().parse_args(["--interval", "1m"]).interval == 60.0
