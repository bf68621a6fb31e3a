"""Cost per million output tokens and requests, and energy cost, at every level of a stored
run: price per hour / (3600 x output tok/s) x 1e6 (issue 21, point 3)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from control.config import ConfigError, parse_config
from control.cost import Prices, comparison_costs, cost_per_million, hourly_price, level_cost
from store import Store, open_store
from tests.store.conftest import summary_from_h200

CONFIG = """
[cost]
currency = "EUR"
kwh = 0.30
[cost.gpu_hourly]
H200 = 3.10
[cost.nodes]
h200-a = 24.80
h200-b = "H200"
"""


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    st = open_store(tmp_path / "runs.db")
    try:
        yield st
    finally:
        st.close()


def _run(st: Store, node: str, gpus: list[int] | None = None) -> str:
    deployment = st.add_deployment(node=node, engine_kind="llamacpp", gpus=gpus)
    run_id = st.create_run(name=node, engine_kind="llamacpp", node=node, deployment_id=deployment)
    for i in range(3):  # the real H200 llama.cpp levels: 605 / 1,311 / 1,502 tok/s
        st.add_level(run_id, summary_from_h200(i))
    st.finish_run(run_id, "completed")
    return run_id


def test_formula_on_round_numbers() -> None:
    # 3.60/h at 1,000 tok/s: 3.6 M tokens an hour, so 1.00 per million
    assert cost_per_million(3.60, 1000.0) == pytest.approx(1.00)
    assert cost_per_million(3.60, 0.0) is None  # nothing made: n/a, never 0 or inf


def test_every_level_costs_price_over_3600_times_throughput(store: Store) -> None:
    prices = parse_config(CONFIG).prices
    whole, per_gpu = _run(store, "h200-a"), _run(store, "h200-b", gpus=[0, 1])
    bare = _run(store, "elsewhere")  # no price for this node
    store.flush()
    comparison = store.compare([whole, per_gpu, bare])
    counts = {r.run_id: len(store.engine_gpus(r) or []) or None for r in comparison.runs}
    costs = comparison_costs(comparison, prices, counts)
    hourly = {whole: 24.80, per_gpu: 2 * 3.10}  # the node, or 2 GPUs of its model
    for row in comparison.rows:
        cost = costs[(row.run_id, row.level_index)]
        if row.run_id == bare:
            assert cost.per_m_output_tokens is None and cost.per_m_requests is None
            continue
        price = hourly[row.run_id]
        assert cost.per_m_output_tokens == pytest.approx(price / (3600 * row.output_tok_s) * 1e6)
        assert cost.per_m_requests == pytest.approx(price / (3600 * row.request_s) * 1e6)
    # e.g. the node at 24.80/h and 1,502 tok/s: 4.59 per million output tokens
    top = next(r for r in comparison.rows if r.run_id == whole and r.level_index == 2)
    assert costs[(whole, 2)].per_m_output_tokens == pytest.approx(
        24.80 / (3600 * top.output_tok_s) * 1e6
    )
    # no GPU telemetry stored for these runs: no energy, so no energy cost ("n/a")
    assert all(c.energy_per_m_output_tokens is None for c in costs.values())


def test_energy_cost_from_the_price_per_kwh() -> None:
    prices = Prices(kwh=0.30)
    # 0.2 J per token: a million tokens take 200 kJ = 0.0556 kWh, so 0.0167 at 0.30/kWh
    cost = level_cost(prices, None, output_tok_s=1000.0, request_s=4.0, j_per_token=0.2)
    assert cost.energy_per_m_output_tokens == pytest.approx(0.2e6 / 3.6e6 * 0.30)
    assert cost.per_m_output_tokens is None  # no hourly price given


def test_flat_price_prices_every_run() -> None:
    found = hourly_price(Prices(flat_hourly=2.0), None, None)
    assert found is not None and found.per_hour == 2.0


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ('[cost.nodes]\nh = "A100"', "add\n[cost.gpu_hourly] A100"),
        ("[cost]\nkwh = -1", "0 or more"),
        ('[cost]\nkwh = "cheap"', "must be a number"),
        ("[cost]\nprice = 3", "unknown keys price"),
    ],
)
def test_bad_cost_tables_are_refused_in_words(text: str, words: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config(text)
    assert words.replace("\n", " ") in str(err.value)
