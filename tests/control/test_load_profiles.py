"""Load profiles in the config file: read, refused in words, saved back in place."""

from __future__ import annotations

from pathlib import Path

import pytest

from control.config import ConfigError, load_config, parse_config
from control.load_profiles import (
    BUILT_IN,
    LoadProfile,
    ProfileConfigError,
    all_profiles,
    profile_from_form,
    save_profile,
)
from loadgen.profiles import ClosedLoop, OpenLoop

CONFIG = """\
# the operator's own words stay
[[nodes]]
name = "h200-a"
url = "http://127.0.0.1:7070"

[load.profiles.bursty]
rate = [0.5, 2]
requests = 10
input_len = 1024
output_len = 64
warmup = 2
timeout_s = 30
slo = "ttft=2s"

[alerts.rules.kv_cache_full]
threshold = 0.8
"""


def test_profiles_are_read_from_the_config_and_build_the_run() -> None:
    config = parse_config(CONFIG)
    (bursty,) = config.load_profiles
    spec = bursty.spec()
    assert spec.levels == (OpenLoop(0.5), OpenLoop(2.0))
    assert (spec.requests_per_level, spec.warmup_requests, spec.request_timeout_s) == (10, 2, 30)
    assert spec.slo is not None and spec.slo.ttft_s == 2.0
    assert (bursty.workload().input_len, bursty.workload().output_len) == (1024, 64)
    assert [p.name for p in all_profiles(config.load_profiles)] == [
        *(p.name for p in BUILT_IN),
        "bursty",
    ]


@pytest.mark.parametrize(
    ("table", "words"),
    [
        ("concurrency = [1]\nrate = [1]", "a concurrency list or arrival rates (one of them)"),
        ("concurrency = [1]\nrequest = 3", "unknown key(s) request"),
        ("concurrency = [0, 2]", "levels must be positive"),
        ('concurrency = [1]\nslo = "ttft=fast"', "slo:"),
    ],
)
def test_a_bad_profile_is_refused_by_name(table: str, words: str) -> None:
    with pytest.raises(ConfigError, match=r"load profile|profile bad") as found:
        parse_config(f"[load.profiles.bad]\n{table}\n")
    assert words in str(found.value)


def test_saving_a_profile_replaces_its_table_and_keeps_the_rest(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text(CONFIG)
    edited = LoadProfile("bursty", (1, 3), 7, 512, 32, warmup_requests=1, timeout_s=20)
    save_profile(path, edited)
    new = LoadProfile("fresh", rates=(1.5,), requests_per_level=5)
    save_profile(path, new)
    text = path.read_text()
    assert text.startswith("# the operator's own words stay\n[[nodes]]")
    assert "[alerts.rules.kv_cache_full]\nthreshold = 0.8\n" in text
    assert text.count("[load.profiles.bursty]") == 1
    config = load_config(path)
    assert config.load_profiles == (edited, new)
    assert [n.name for n in config.nodes] == ["h200-a"]


def test_the_form_says_which_field_is_wrong() -> None:
    ok = profile_from_form("mine", "0.5, 1 req/s", "6", "64", "16", "1", "30", "")
    assert (ok.rates, ok.concurrency, ok.warmup_requests) == ((0.5, 1.0), (), 1)
    with pytest.raises(ProfileConfigError, match="requests: 'many' is not a number"):
        profile_from_form("mine", "1,2", "many", "64", "16", "0", "30", "")
    with pytest.raises(ProfileConfigError, match="levels"):
        profile_from_form("mine", "1.5,2", "4", "64", "16", "0", "30", "")
    assert ClosedLoop(2) in profile_from_form("m", "1,2", "4", "8", "8", "", "9", "").spec().levels
