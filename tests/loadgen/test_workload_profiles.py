"""Workloads (lengths, prefixes, ShareGPT) and load profiles (arrivals, SLOs)."""

from __future__ import annotations

import itertools
import json
import statistics
from pathlib import Path

import pytest

from loadgen.profiles import (
    Arrival,
    ClosedLoop,
    LoadSpec,
    OpenLoop,
    ProfileError,
    Slo,
    parse_slo,
)
from loadgen.workload import PromptSource, Workload, WorkloadError


def test_range_ratio_draws_lengths_in_vllm_interval() -> None:
    source = PromptSource(Workload(input_len=100, output_len=50, range_ratio=0.2, seed=3))
    items = [source.item(n) for n in range(400)]
    ins = [i.input_len for i in items]
    outs = [i.output_len for i in items]
    assert min(ins) >= 80 and max(ins) <= 120
    assert min(outs) >= 40 and max(outs) <= 60
    assert len(set(ins)) > 20  # really drawn, not fixed
    assert all(len(i.prompt.split()) == i.input_len for i in items)


def test_prompts_are_deterministic_by_seed_and_distinct_by_number() -> None:
    a, b = PromptSource(Workload(seed=1)), PromptSource(Workload(seed=1))
    assert a.item(7) == b.item(7)
    assert a.item(7).prompt != a.item(8).prompt
    assert PromptSource(Workload(seed=2)).item(7).prompt != a.item(7).prompt


def test_shared_prefix_is_identical_and_then_prompts_differ() -> None:
    source = PromptSource(Workload(input_len=20, shared_prefix_len=64))
    p1, p2 = source.item(0).prompt.split(), source.item(1).prompt.split()
    assert p1[:64] == p2[:64]
    assert p1[64:] != p2[64:]
    assert source.item(0).input_len == 84


def test_sharegpt_file_gives_first_human_turns(tmp_path: Path) -> None:
    data = [
        {
            "conversations": [
                {"from": "human", "value": "Why is the sky blue?"},
                {"from": "gpt", "value": "Rayleigh scattering."},
            ]
        },
        {"conversations": [{"from": "human", "value": "lonely question"}]},  # unanswered
        {"id": "no conversations"},
        {
            "conversations": [
                {"from": "human", "value": "Name a prime."},
                {"from": "gpt", "value": "7"},
            ]
        },
    ]
    path = tmp_path / "sharegpt.json"
    path.write_text(json.dumps(data))
    # the entry without conversations is malformed: named by its line, never skipped silently
    with pytest.raises(WorkloadError, match=r"line 1: .*conversations"):
        PromptSource(Workload(dataset=str(path), output_len=16))
    source = PromptSource(Workload(dataset=str(path), output_len=16, on_bad_line="skip"))
    prompts = [source.item(n).prompt for n in range(4)]
    assert prompts == ["Why is the sky blue?", "Name a prime."] * 2
    assert source.item(0).output_len == 16
    assert source.dataset is not None and source.dataset.unused == 1
    assert source.dataset.bad_count == 1


@pytest.mark.parametrize(
    ("content", "words"),
    [
        ("{not json", "line 1: not JSON"),
        ('{"a": 1}', 'line 1: no "prompt"'),
        ("[]", "no prompt to send"),
        ("plain text", "neither a ShareGPT"),
    ],
)
def test_bad_dataset_is_a_clear_error(tmp_path: Path, content: str, words: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(WorkloadError, match=words):
        PromptSource(Workload(dataset=str(path)))


def test_missing_dataset_names_the_file(tmp_path: Path) -> None:
    with pytest.raises(WorkloadError, match=r"nope\.json"):
        PromptSource(Workload(dataset=str(tmp_path / "nope.json")))


@pytest.mark.parametrize(
    "kwargs",
    [{"input_len": 0}, {"output_len": -1}, {"range_ratio": 1.0}, {"shared_prefix_len": -2}],
)
def test_nonsense_workloads_are_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(WorkloadError):
        Workload(**kwargs)  # type: ignore[arg-type]


def test_poisson_and_gamma_arrivals_have_the_asked_rate_and_burstiness() -> None:
    def gaps(level: OpenLoop) -> list[float]:
        return list(itertools.islice(level.gaps_s(seed=11), 20_000))

    poisson = gaps(OpenLoop(10.0, Arrival.POISSON))
    bursty = gaps(OpenLoop(10.0, Arrival.GAMMA, burstiness=0.25))
    constant = gaps(OpenLoop(10.0, Arrival.CONSTANT))
    for g in (poisson, bursty, constant):
        assert statistics.fmean(g) == pytest.approx(0.1, rel=0.03)
    cv = [statistics.pstdev(g) / statistics.fmean(g) for g in (poisson, bursty, constant)]
    assert cv[0] == pytest.approx(1.0, rel=0.05)  # exponential gaps
    assert cv[1] == pytest.approx(2.0, rel=0.08)  # gamma shape 0.25 -> CV 1/sqrt(0.25)
    assert cv[2] == 0.0
    assert gaps(OpenLoop(10.0)) == poisson  # same seed, same schedule


def test_parse_slo_and_durations() -> None:
    assert parse_slo("ttft=500ms,tpot=50ms") == Slo(ttft_s=0.5, tpot_s=0.05)
    assert parse_slo(" e2e = 2s ") == Slo(e2e_s=2.0)
    for bad in ("ttft", "latency=5ms", "ttft=fast", ""):
        with pytest.raises(ProfileError):
            parse_slo(bad)


def test_slo_judgement() -> None:
    slo = Slo(ttft_s=0.5, tpot_s=0.05)
    assert slo.met_by(0.4, 0.04, 3.0)
    assert not slo.met_by(0.6, 0.04, 3.0)
    assert not slo.met_by(0.4, 0.06, 3.0)
    assert slo.met_by(0.4, None, 0.4)  # a one-token answer has no TPOT to miss


@pytest.mark.parametrize(
    "kwargs",
    [
        {"levels": ()},
        {"levels": (ClosedLoop(1),)},  # no stop condition
        {"levels": (ClosedLoop(1),), "requests_per_level": 0},
        {"levels": (ClosedLoop(1),), "duration_s": -1.0},
    ],
)
def test_load_spec_refuses_nonsense(kwargs: dict[str, object]) -> None:
    with pytest.raises(ProfileError):
        LoadSpec(**kwargs)  # type: ignore[arg-type]


def test_levels_refuse_nonsense() -> None:
    with pytest.raises(ProfileError):
        ClosedLoop(0)
    with pytest.raises(ProfileError):
        OpenLoop(0.0)
    with pytest.raises(ProfileError):
        OpenLoop(1.0, Arrival.GAMMA, burstiness=0.0)
