"""Fuzzing the values a start request puts into an engine's Compose environment (issue 22,
docs/reliability.md): the model path and the API key, arbitrary text, for every engine on
the nvidia platform. Control characters are refused by the launch config, a quoting or
interpolation character (ENV_UNSAFE_CHARS) by the renderer, each with its own words; a
value free of both is accepted unchanged, and ENGINE_ARGS, split as Compose splits a string
command, gives the model back as one argument: nothing can add a flag. Bounded in time."""

from __future__ import annotations

import os
import shlex

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engines.catalog import (
    ENV_UNSAFE_CHARS,
    EngineSpec,
    LaunchConfig,
    UnsupportedOption,
    all_specs,
)
from tests.waiting import PROPERTY_DEADLINE_MS

SETTINGS = settings(
    max_examples=int(os.environ.get("PROP_EXAMPLES", "80")), deadline=PROPERTY_DEADLINE_MS
)
SPECS = all_specs()
values = st.text(max_size=16) | st.text(st.sampled_from(sorted(ENV_UNSAFE_CHARS) + list("a '")))


def _takes_a_key(spec: EngineSpec) -> bool:
    try:
        spec.compose_env(
            LaunchConfig(model="m", api_key="k"), deployment_id="d", node="n", platform="nvidia"
        )
    except UnsupportedOption:  # Ollama: no key at all
        return False
    return True


def _control(text: str) -> bool:
    return any(ord(c) < 32 or c == "\x7f" for c in text)


@pytest.mark.parametrize("spec", SPECS, ids=[s.kind for s in SPECS])
@SETTINGS
@given(name=values, key=st.none() | values.filter(bool))
def test_a_model_or_key_is_refused_in_words_or_reaches_compose_unchanged(
    spec: EngineSpec, name: str, key: str | None
) -> None:
    if not _takes_a_key(spec):
        key = None
    model = f"/models/{name}.gguf"
    texts = [model] + ([key] if key else [])
    if any(_control(t) for t in texts):
        with pytest.raises(ValueError, match="contains control characters"):
            LaunchConfig(model=model, api_key=key)
        return
    cfg = LaunchConfig(model=model, api_key=key)
    if any(ENV_UNSAFE_CHARS.intersection(t) for t in texts):
        with pytest.raises(ValueError, match="unsafe in an env file"):
            spec.compose_env(cfg, deployment_id="d", node="n", platform="nvidia")
        return
    try:
        env = spec.compose_env(cfg, deployment_id="d", node="n", platform="nvidia")
    except ValueError as exc:  # only a quote shlex.join had to escape with '"' (the model,
        # or a key the engine takes as a flag: TGI, SGLang, LMDeploy)
        assert any("'" in t for t in texts) and "unsafe in an env file" in str(exc), exc
        return
    assert env["MODEL"] == model
    if "ENGINE_ARGS" in env and spec.kind not in ("ollama",):  # Ollama pulls by name
        assert model in shlex.split(env["ENGINE_ARGS"])
    assert not any(ENV_UNSAFE_CHARS.intersection(v) for v in env.values())
