"""The fleet tables' order and words, without a screen."""

from __future__ import annotations

from control.fleet_view import (
    SortKey,
    by_name,
    exit_reason,
    fmt_duration,
    gpus_label,
    model_label,
    natural,
    node_column_width,
    sort_rows,
)
from control.model import NodeState


def test_numbers_sort_busiest_first_and_unknown_last_never_as_zero() -> None:
    rows = [("a/1", None), ("a/2", 0.0), ("a/3", 5.0), ("b/1", 5.0)]  # by_name's order
    ordered = sort_rows(rows, SortKey.TOK_S, lambda _key, row: row[1])
    assert [k for k, _ in ordered] == ["a/3", "b/1", "a/2", "a/1"]


def test_by_node_orders_numbers_in_names_by_value() -> None:
    nodes = [NodeState("n-10"), NodeState("n-2"), NodeState("a")]
    assert [n.name for n in by_name(nodes)] == ["a", "n-2", "n-10"]
    rows = [("n-2/b", 0), ("n-2/a", 0), ("n-10/x", 0)]  # built from by_name's order
    assert sort_rows(rows, SortKey.NODE, lambda _k, _v: None) == rows
    assert natural("h200-2") < natural("h200-10")


def test_the_sort_key_cycles_through_every_order() -> None:
    key = SortKey.NODE
    seen = [key := key.next() for _ in SortKey]
    assert seen == [SortKey.UTIL, SortKey.MEMORY, SortKey.TOK_S, SortKey.KV, SortKey.NODE]


def test_exit_reasons_name_the_signal() -> None:
    assert exit_reason(137) == "exit code 137: killed by SIGKILL (often the out-of-memory killer)"
    assert exit_reason(-9) == "exit code -9: killed by SIGKILL (often the out-of-memory killer)"
    assert exit_reason(139) == "exit code 139: killed by SIGSEGV"
    assert exit_reason(1) == "exit code 1 (an error it reported)"
    assert exit_reason(None) == "exit status unknown"


def test_durations_models_and_widths_as_columns_show_them() -> None:
    assert [fmt_duration(s) for s in (45, 725, 3725, 2 * 86400 + 5 * 3600, None)] == [
        "45s",
        "12m05s",
        "1h02m",
        "2d05h",
        "n/a",
    ]
    assert [gpus_label(g) for g in ((0, 1, 2, 3), (0, 2), (0, 1, 2, 3, 6), ())] == [
        "0-3",
        "0,2",
        "0-3,6",
        "-",
    ]
    assert model_label("/models/tiny.gguf") == "tiny.gguf"
    assert model_label("meta-llama/Llama-3.1-8B") == "Llama-3.1-8B"
    assert model_label(None) == "-"
    assert node_column_width(["a"]) == 6
    assert node_column_width(["gpu-rack-12-h200-node-b"]) == 23
    assert node_column_width(["x" * 40]) == 24
