"""Pre-flight (issue 19, point 5): before the first measured request the endpoint
answers, serves the model named and is the kind named; otherwise a clear error that
lists what the server offers, and no run is saved."""

from __future__ import annotations

from pathlib import Path

from control.preflight import kinds_in_metrics, kinds_owning
from sim import RunningSim
from tests.loadgen.conftest import bench


async def test_a_wrong_model_fails_before_the_run_with_the_servers_list_and_stores_nothing(
    vllm_sim: RunningSim, tmp_path: Path
) -> None:
    """It was a run of 100 % http_status failures, saved to the store."""
    db = tmp_path / "runs.db"
    code, _out, err = await bench(
        "--url", vllm_sim.url, "--model", "no-such-model", "--engine", "vllm",
        "--requests", "2", "--save", "--db", str(db),
    )  # fmt: skip
    assert code == 2, err
    assert "does not serve model 'no-such-model'" in err
    assert f"it serves: {vllm_sim.profile.model}" in err
    assert not db.exists()  # the store was never opened: no run, no empty file


async def test_a_wrong_engine_kind_is_refused_and_an_unnamed_one_is_detected(
    vllm_sim: RunningSim, tmp_path: Path
) -> None:
    base = ("--url", vllm_sim.url, "--requests", "1", "--input-len", "8", "--output-len", "4")
    code, _out, err = await bench(*base, "--engine", "sglang")
    assert code == 2, err
    assert "is vllm by its own word, not sglang: pass --engine vllm" in err
    out_json = tmp_path / "run.json"
    code, _out, err = await bench(*base, "--json", str(out_json))  # neither model nor kind
    assert code == 0, err
    assert '"engine": "vllm"' in out_json.read_text()
    assert f'"model": "{vllm_sim.profile.model}"' in out_json.read_text()


def test_models_and_metrics_of_no_known_engine_detect_nothing() -> None:
    assert kinds_owning({"data": [{"id": "m"}]}) == ()
    assert kinds_owning({"data": [{"id": "m", "owned_by": "llamacpp"}]}) == ("llamacpp",)
    assert kinds_in_metrics("# HELP up\nup 1\n") == ()
    assert kinds_in_metrics('vllm:num_requests_running{model_name="m"} 0\n') == ("vllm",)


async def test_lengths_longer_than_vllms_max_model_len_are_refused_before_the_run(
    vllm_sim: RunningSim, tmp_path: Path
) -> None:
    """vLLM states its context per model (``max_model_len`` in /v1/models, which the
    simulator serves as vLLM does): a prompt + output beyond it would be a 400 for every
    request.  Detected too when the kind is not named."""
    db = tmp_path / "runs.db"
    limit = vllm_sim.profile.max_model_len
    base = ("--url", vllm_sim.url, "--requests", "1", "--save", "--db", str(db))
    for kind in (("--engine", "vllm"), ()):
        code, _out, err = await bench(
            *base, *kind, "--input-len", str(limit - 100), "--output-len", "101"
        )
        assert code == 2, err
        flat = " ".join(err.split())
        assert f"= {limit + 1} tokens, more than the context of {limit} tokens that vLLM" in flat
        assert "(max_model_len in /v1/models)" in flat, err
        assert not db.exists()
    code, _out, err = await bench(*base, "--input-len", str(limit - 100), "--output-len", "50")
    assert code == 0, err  # within the context (the chat template's tokens too): it runs
