"""What a load level costs: a node's hourly price over its throughput, and its energy.

The operator prices a node as a whole or by its GPU model (config ``[cost]``)::

    [cost]
    currency = "EUR"
    kwh = 0.30                    # price per kWh: energy cost beside the hourly one
    [cost.gpu_hourly]             # per GPU of that model, per hour
    H100 = 2.50
    [cost.nodes]
    h100-a = 19.90                # a number: the whole node, per hour
    h100-b = "H100"               # a GPU model: gpu_hourly[H100] x the engine's GPUs

A level at ``output tok/s`` keeps the node busy ``1e6 / (3600 x tok/s)`` hours per million
output tokens, so it costs ``price_per_hour / (3600 x tok/s) x 1e6``; the same with
requests/s per million requests.  Energy cost is the level's J/token over a kWh (3.6e6 J).
A figure that cannot be known (no price, no throughput, no energy) is None ("n/a").
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from store.models import Comparison

SECONDS_PER_HOUR = 3600.0
JOULES_PER_KWH = 3.6e6
PER_MILLION = 1e6


class CostConfigError(ValueError):
    """A ``[cost]`` table infer-top cannot use (the message says what to write)."""


@dataclass(frozen=True, slots=True)
class Prices:
    currency: str = "USD"
    kwh: float | None = None
    """Price per kWh of GPU energy."""
    gpu_hourly: Mapping[str, float] = field(default_factory=dict)
    """GPU model -> price per GPU per hour."""
    node_hourly: Mapping[str, float] = field(default_factory=dict)
    """Node -> price of the whole node per hour (wins over its GPU model)."""
    node_gpu: Mapping[str, str] = field(default_factory=dict)
    """Node -> its GPU model, priced by ``gpu_hourly`` x the engine's GPUs."""
    flat_hourly: float | None = None
    """One price per hour for every run (the command line's ``--price-per-hour``)."""

    @property
    def configured(self) -> bool:
        return bool(self.node_hourly or self.node_gpu or self.kwh is not None or self.flat_hourly)


@dataclass(frozen=True, slots=True)
class HourlyPrice:
    per_hour: float
    basis: str
    """How it was found, in words: "node h100-a" or "2 x H100 at 2.50/h"."""


@dataclass(frozen=True, slots=True)
class LevelCost:
    per_m_output_tokens: float | None
    per_m_requests: float | None
    energy_per_m_output_tokens: float | None


def cost_per_million(price_per_hour: float, per_s: float) -> float | None:
    """The price of a million units (tokens, requests) made at ``per_s`` units a second:
    price_per_hour / (3600 x per_s) x 1e6; None when nothing was made."""
    if per_s <= 0 or not math.isfinite(per_s):
        return None
    return price_per_hour / (SECONDS_PER_HOUR * per_s) * PER_MILLION


def energy_cost_per_million(kwh_price: float, j_per_token: float | None) -> float | None:
    if j_per_token is None:
        return None
    return j_per_token * PER_MILLION / JOULES_PER_KWH * kwh_price


def hourly_price(prices: Prices, node: str | None, gpu_count: int | None) -> HourlyPrice | None:
    """The node's hourly price: its own, else its GPU model's x the engine's GPUs (one
    where the run does not say which); a flat price wins over both."""
    if prices.flat_hourly is not None:
        return HourlyPrice(prices.flat_hourly, f"{prices.flat_hourly:g}/h as given")
    if node is None:
        return None
    if node in prices.node_hourly:
        return HourlyPrice(prices.node_hourly[node], f"node {node}")
    model = prices.node_gpu.get(node)
    if model is None:
        return None
    gpus = gpu_count or 1
    each = prices.gpu_hourly[model]
    return HourlyPrice(each * gpus, f"{gpus} x {model} at {each:g}/h")


def level_cost(
    prices: Prices,
    hourly: HourlyPrice | None,
    *,
    output_tok_s: float,
    request_s: float,
    j_per_token: float | None,
) -> LevelCost:
    return LevelCost(
        per_m_output_tokens=None
        if hourly is None
        else cost_per_million(hourly.per_hour, output_tok_s),
        per_m_requests=None if hourly is None else cost_per_million(hourly.per_hour, request_s),
        energy_per_m_output_tokens=(
            None if prices.kwh is None else energy_cost_per_million(prices.kwh, j_per_token)
        ),
    )


def comparison_costs(
    comparison: Comparison, prices: Prices, gpu_counts: Mapping[str, int | None]
) -> dict[tuple[str, int], LevelCost]:
    """Each level's cost, keyed by (run id, level index); ``gpu_counts`` are the engine's
    GPUs per run (``Store.engine_gpus``) for a node priced by its GPU model."""
    hourly = {
        run.run_id: hourly_price(prices, run.node, gpu_counts.get(run.run_id))
        for run in comparison.runs
    }
    return {
        (row.run_id, row.level_index): level_cost(
            prices,
            hourly[row.run_id],
            output_tok_s=row.output_tok_s,
            request_s=row.request_s,
            j_per_token=row.j_per_token,
        )
        for row in comparison.rows
    }


def _price(value: object, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise CostConfigError(f"{where} must be a number (a price), got {value!r}")
    if not math.isfinite(value) or value < 0:
        raise CostConfigError(f"{where} must be a price of 0 or more, got {value!r}")
    return float(value)


def parse_prices(raw: object) -> Prices:
    """The ``[cost]`` table (absent: no prices, every cost "n/a")."""
    if raw is None:
        return Prices()
    if not isinstance(raw, dict):
        raise CostConfigError("'cost' must be a table: [cost]")
    unknown = set(raw) - {"currency", "kwh", "gpu_hourly", "nodes"}
    if unknown:
        raise CostConfigError(
            f"[cost] has unknown keys {', '.join(sorted(unknown))}; "
            "known: currency, kwh, gpu_hourly, nodes"
        )
    currency = raw.get("currency", "USD")
    if not isinstance(currency, str) or not currency.strip():
        raise CostConfigError(f'cost.currency must be a name such as "EUR", got {currency!r}')
    kwh = None if raw.get("kwh") is None else _price(raw["kwh"], "cost.kwh")
    gpu_raw, nodes_raw = raw.get("gpu_hourly", {}), raw.get("nodes", {})
    if not isinstance(gpu_raw, dict) or not isinstance(nodes_raw, dict):
        raise CostConfigError("cost.gpu_hourly and cost.nodes must be tables")
    gpu_hourly = {str(k): _price(v, f"cost.gpu_hourly.{k}") for k, v in gpu_raw.items()}
    node_hourly: dict[str, float] = {}
    node_gpu: dict[str, str] = {}
    for node, value in nodes_raw.items():
        if isinstance(value, str):
            if value not in gpu_hourly:
                raise CostConfigError(
                    f"cost.nodes.{node} = {value!r} names a GPU model with no price: add "
                    f"[cost.gpu_hourly] {value} = <price per GPU per hour>"
                )
            node_gpu[node] = value
        else:
            node_hourly[node] = _price(value, f"cost.nodes.{node}")
    return Prices(
        currency=currency.strip(),
        kwh=kwh,
        gpu_hourly=gpu_hourly,
        node_hourly=node_hourly,
        node_gpu=node_gpu,
    )
