"""A waiting start call lasts as long as the agent's health gate may, so a 30-minute
vLLM load is not cut by the client at a fixed 10 minutes."""

from __future__ import annotations

from agents.client import START_ANSWER_MARGIN_S, _start_answer_budget_s
from engines.catalog import get_spec


def test_the_start_call_waits_the_engines_own_budget_or_the_one_asked_for() -> None:
    vllm = get_spec("vllm").start_timeout_s
    assert vllm > 600  # the case a fixed 600 s client timeout cut short
    assert _start_answer_budget_s("vllm", None) == vllm + START_ANSWER_MARGIN_S
    assert _start_answer_budget_s("vllm", 42.0) == 42.0 + START_ANSWER_MARGIN_S
    assert _start_answer_budget_s("sim", None) == 600.0  # the simulator has no spec
