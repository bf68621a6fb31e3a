"""Profiles are data: bad files give clear errors, never a half-read profile."""

from __future__ import annotations

from pathlib import Path

import pytest

from sim import ProfileError, load_profile
from sim.textgen import plan_output

GOOD = """
name = "mine"
kind = "vllm"
model = "m"
hardware = "laptop (simulated)"
[scheduler]
max_num_seqs = 4
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "p.toml"
    path.write_text(text)
    return path


def test_a_profile_from_a_path(tmp_path: Path) -> None:
    p = load_profile(write(tmp_path, GOOD))
    assert (p.name, p.kind, p.max_num_seqs) == ("mine", "vllm", 4)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (GOOD.replace('kind = "vllm"', 'kind = "vllmm"'), "unknown engine kind"),
        (GOOD + "max_num_sqes = 3\n", "unknown keys"),
        (GOOD.replace("max_num_seqs = 4", "max_num_seqs = 0"), "max_num_seqs must be > 0"),
        (GOOD + "[output]\neos_min_tokens = 9\neos_max_tokens = 3\n", "eos_min_tokens"),
        (GOOD.replace('model = "m"', ""), "missing 'model'"),
        (GOOD.replace("[scheduler]", "simulated = false\n[scheduler]"), "real hardware"),
        ("name = [", "not valid TOML"),
    ],
)
def test_bad_profiles_are_refused_with_the_reason(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ProfileError, match=message):
        load_profile(write(tmp_path, text))


def test_unknown_profile_name_lists_the_known_ones() -> None:
    with pytest.raises(ProfileError, match="h100-llama2-7b-vllm"):
        load_profile("no-such-engine")


def test_length_control_follows_the_engine() -> None:
    import random

    vllm = load_profile("h100-llama2-7b-vllm")
    tgi = load_profile("h100-llama2-7b-tgi")
    lmdeploy = load_profile("h100-llama2-7b-lmdeploy")
    forced = plan_output(vllm, random.Random(1), max_tokens=1500, ignore_eos=True)
    assert (forced.tokens, forced.finish_reason) == (1500, "length")
    natural = plan_output(tgi, random.Random(1), max_tokens=1500, ignore_eos=True)
    assert natural.tokens <= tgi.eos_max_tokens and natural.finish_reason == "stop"
    floor = plan_output(vllm, random.Random(1), max_tokens=1500, min_tokens={"min_tokens": 1200})
    assert floor.tokens >= 1200
    # LMDeploy reads min_new_tokens, not min_tokens.
    ignored = plan_output(
        lmdeploy, random.Random(1), max_tokens=1500, min_tokens={"min_tokens": 1200}
    )
    honoured = plan_output(
        lmdeploy, random.Random(1), max_tokens=1500, min_tokens={"min_new_tokens": 1200}
    )
    assert ignored.tokens < 1200 <= honoured.tokens
