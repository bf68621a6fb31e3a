"""The JSON telemetry parsers (llama.cpp /slots, Ollama /api/ps, TensorRT-LLM
iteration stats) over generated documents: a document built valid parses to the
generated values; one built invalid gives the declared error, naming the entry."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engines.catalog import (
    MetricsParseError,
    SlotsSummary,
    SlotState,
    get_spec,
    merge_llamacpp,
    parse_llamacpp_slots,
)
from engines.sample import EngineSample

SLOTS = (
    Path(__file__).resolve().parents[1] / "fixtures" / "llamacpp-live" / "slots-busy.json"
).read_text()
# PROP_EXAMPLES=2000 for a deeper search than the default quick run
SETTINGS = settings(
    max_examples=int(os.environ.get("PROP_EXAMPLES", "60")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)
# JSON numbers a float holds exactly, so int(as_float(n)) == n
ints = st.integers(min_value=-(2**53), max_value=2**53)
counts = st.integers(min_value=0, max_value=2**53)

# -- llama.cpp /slots ------------------------------------------------------------

# llama-server keeps slot ids and counts in 32-bit ints: anything else is refused
# (tests/engines/test_catalog_llamacpp_slots.py), so a valid document stays inside.
slot_ints = st.integers(min_value=0, max_value=2**31 - 1)
slot_doc = st.fixed_dictionaries(
    {"id": slot_ints, "n_ctx": slot_ints, "is_processing": st.booleans()},
    optional={
        "n_prompt_tokens": slot_ints,
        "n_past": slot_ints,
        "next_token": st.fixed_dictionaries({"n_decoded": slot_ints}).map(lambda d: [d]),
    },
)


def slot_state(doc: dict[str, Any]) -> SlotState:
    return SlotState(
        slot_id=doc["id"],
        n_ctx=doc["n_ctx"],
        is_processing=doc["is_processing"],
        n_prompt_tokens=doc.get("n_prompt_tokens"),
        n_decoded=doc["next_token"][0]["n_decoded"] if "next_token" in doc else None,
        n_past=doc.get("n_past"),
    )


@SETTINGS
@given(docs=st.lists(slot_doc, max_size=6))
def test_generated_slots_parse_to_the_generated_values(docs: list[dict[str, Any]]) -> None:
    slots = parse_llamacpp_slots(json.dumps(docs))
    assert slots == SlotsSummary(tuple(slot_state(d) for d in docs))
    merged = merge_llamacpp(EngineSample(engine="llamacpp"), slots)
    busy = [d for d in docs if d["is_processing"]]
    assert merged.requests_running == len(busy)
    assert merged.generation_tokens_in_flight == sum(
        d["next_token"][0]["n_decoded"] for d in busy if "next_token" in d
    )


@SETTINGS
@given(doc=json_values.filter(lambda v: not isinstance(v, list)))
def test_slots_document_that_is_not_a_list_is_refused(doc: object) -> None:
    answered = isinstance(doc, dict) and "error" in doc  # the 501 body without --slots
    error = "server answered an error" if answered else "expected a JSON list of slots"
    with pytest.raises(MetricsParseError, match=error):
        parse_llamacpp_slots(json.dumps(doc))


bad_slot = st.one_of(
    json_values.filter(lambda v: not isinstance(v, dict)).map(lambda v: (v, "is ")),
    slot_doc.flatmap(
        lambda d: st.one_of(
            st.just({k: v for k, v in d.items() if k != "n_ctx"}),
            json_values.filter(lambda v: not isinstance(v, bool)).map(
                lambda v: {**d, "is_processing": v}
            ),
        )
    ).map(lambda v: (v, "lacks n_ctx / is_processing")),
)


@SETTINGS
@given(good=st.lists(slot_doc, max_size=3), bad=bad_slot, after=st.lists(json_values, max_size=3))
def test_first_bad_slot_entry_is_named(
    good: list[dict[str, Any]], bad: tuple[object, str], after: list[object]
) -> None:
    entry, why = bad
    with pytest.raises(MetricsParseError, match=f"entry {len(good)} {why}"):
        parse_llamacpp_slots(json.dumps([*good, entry, *after]))


@SETTINGS
@given(cut=st.integers(min_value=0, max_value=len(SLOTS) - 1))
def test_truncated_slots_are_refused_as_not_json(cut: int) -> None:
    with pytest.raises(MetricsParseError, match="not JSON"):
        parse_llamacpp_slots(SLOTS[:cut])


# -- Ollama /api/ps --------------------------------------------------------------

model_doc = st.fixed_dictionaries(
    {"name": st.text(max_size=8), "size": counts, "size_vram": counts, "context_length": counts}
)


@SETTINGS
@given(models=st.lists(model_doc, max_size=4, unique_by=lambda m: m["name"]))
def test_generated_ollama_ps_parses_to_the_generated_values(models: list[dict[str, Any]]) -> None:
    raw: dict[str, float] = {"models_loaded": float(len(models))}
    for m in models:
        for field in ("size", "size_vram", "context_length"):
            raw[f'{field}{{model="{m["name"]}"}}'] = float(m[field])
    raw["size_vram_bytes"] = sum(float(m["size_vram"]) for m in models)  # as summed: floats
    raw["size_bytes"] = sum(float(m["size"]) for m in models)
    sample = get_spec("ollama").parse_metrics(json.dumps({"models": models}))
    assert sample == EngineSample(engine="ollama", raw=raw)


@SETTINGS
@given(
    doc=st.one_of(
        json_values.filter(lambda v: not isinstance(v, dict)),
        st.dictionaries(st.text(max_size=8), json_values, max_size=3).filter(
            lambda d: not isinstance(d.get("models"), list)
        ),
    )
)
def test_ollama_ps_without_a_models_list_is_refused(doc: object) -> None:
    with pytest.raises(MetricsParseError, match="expected an object with a 'models' list"):
        get_spec("ollama").parse_metrics(json.dumps(doc))


# -- TensorRT-LLM iteration stats ---------------------------------------------------

iteration_doc = st.fixed_dictionaries(
    {
        "numActiveRequests": counts,
        "numQueuedRequests": counts,
        "kvCacheStats": st.fixed_dictionaries(
            {
                "usedNumBlocks": counts,
                "maxNumBlocks": st.integers(min_value=1, max_value=2**53),
                "cacheHitRate": st.floats(min_value=0.0, max_value=1.0),
            }
        ),
    }
)


@SETTINGS
@given(iterations=st.lists(iteration_doc, max_size=4), as_object=st.booleans())
def test_generated_trtllm_stats_parse_to_the_newest_iteration(
    iterations: list[dict[str, Any]], as_object: bool
) -> None:
    spec = get_spec("trtllm")
    doc: object = iterations[-1] if as_object and iterations else iterations
    sample = spec.parse_metrics(json.dumps(doc))
    if not iterations:  # nothing ran since the last poll: nothing measured, not zeros
        assert sample == EngineSample(engine="trtllm")  # and its version unknown: not told
        return
    last = iterations[-1]
    kv = last["kvCacheStats"]
    assert sample == EngineSample(
        engine="trtllm",
        kv_cache_usage=min(kv["usedNumBlocks"] / kv["maxNumBlocks"], 1.0),
        requests_running=float(last["numActiveRequests"]),
        requests_waiting=float(last["numQueuedRequests"]),
        prefix_cache_hit_rate=kv["cacheHitRate"],
        raw={
            "numActiveRequests": float(last["numActiveRequests"]),
            "numQueuedRequests": float(last["numQueuedRequests"]),
            **{f"kvCacheStats.{k}": float(v) for k, v in kv.items()},
        },
    )


# -- both: an entry that is not an object --------------------------------------------

ENTRIES: dict[
    str, tuple[st.SearchStrategy[dict[str, Any]], Callable[[list[object]], object], str]
] = {
    "ollama": (model_doc, lambda entries: {"models": entries}, "model entry is"),
    "trtllm": (iteration_doc, lambda entries: entries, "iteration entry is"),
}


@SETTINGS
@given(
    kind=st.sampled_from(sorted(ENTRIES)),
    entry=json_values.filter(lambda v: not isinstance(v, dict)),
    data=st.data(),
)
def test_an_entry_that_is_not_an_object_is_refused(
    kind: str, entry: object, data: st.DataObject
) -> None:
    good_doc, document, error = ENTRIES[kind]
    good = data.draw(st.lists(good_doc, max_size=3))
    with pytest.raises(MetricsParseError, match=error):
        get_spec(kind).parse_metrics(json.dumps(document([*good, entry])))
