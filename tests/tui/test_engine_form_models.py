"""The Engines screen's start form over a real embedded agent: it offers the node's
models (the rig's tiny GGUF and tiny Hugging Face model) and shows the fit of the one
picked from its files, the estimator fed the files' numbers by hand."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from textual.pilot import Pilot
from textual.widgets import Label, Log, OptionList, Select

from control.engine_ops import fit_text
from engines.fit import ModelShape, estimate_fit
from tests.hub_standin import HubRepo, HubStandin, serve_hub
from tests.local_models import REPO, hf_cache_of, rig_hf_model
from tests.tui.driving import live_app, wait_for_action
from tests.tui.helpers import text_of, type_into, wait_until

NODE = "models-node"


def asked(pilot: Pilot[object]) -> str:
    """The confirmation's question, once one is up."""
    found = pilot.app.screen.query("#confirm Label")
    return str(found.first(Label).render()) if found else ""


def models_dir(tmp_path: Path, gguf_file: Path) -> Path:
    models = tmp_path / "models"
    models.mkdir()
    shutil.copyfile(gguf_file, models / "tiny.gguf")
    return models


async def test_the_start_form_offers_the_node_models_with_their_fit(
    rig: object, tmp_path: Path
) -> None:
    hf_model, params = rig_hf_model()
    hf_cache_of(hf_model, tmp_path / "hf")
    models = models_dir(tmp_path, rig.tiny_model)  # type: ignore[attr-defined]
    options = {"model_dirs": (models,), "cache_dirs": (tmp_path / "hf",), "cache_volumes": ()}
    async with live_app(tmp_path, NODE, "the agent's first frame", **options) as live:
        pilot, app = live.pilot, live.app
        await pilot.press("3")
        offered = app.screen.query_one("#local-model", Select)
        listed = offered.query_one(OptionList)  # the drop-down: the prompt, then the models
        await wait_until(pilot, lambda: listed.option_count == 3, "the node's models offered")
        labels = [str(listed.get_option_at_index(i).prompt) for i in (1, 2)]
        assert labels == ["tiny.gguf  gguf F16  7.5 MiB", f"{REPO}  safetensors  2.2 MiB"]

        app.screen.query_one("#kind", Select).value = "vllm"
        offered.value = REPO
        await wait_until(pilot, lambda: app.screen.query_one("#model").value == REPO, "picked")
        await type_into(pilot, "#context", "2048")
        await type_into(pilot, "#seqs", "8")
        app.screen.query_one("#gpus").select(0)
        gpu_mem = app.model.nodes[NODE].frame.gpus[0].mem_total_bytes
        by_hand = ModelShape(REPO, params / 1e9, 2, 2, 32, 128, 4, 2048)
        est = estimate_fit(
            by_hand, "vllm", context_len=2048, gpu_mem_total_bytes=gpu_mem,
            concurrent_seqs=8, weight_dtype="fp32",
        )  # fmt: skip
        expected = f"{fit_text(est, 2048, 8)} (from the node's files)"
        await wait_until(pilot, lambda: text_of(pilot, "#fit") == expected, "the files' fit")
        local = text_of(pilot, "#local-fit")
        assert "fits infer-top/tiny-llama" in local and "fits tiny.gguf" in local, local


async def test_a_start_whose_model_is_not_on_the_node_offers_the_pull_with_its_progress(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model, _ = rig_hf_model()
    files = {f.name: f.read_bytes() for f in model.iterdir()}
    hub = HubStandin({REPO: HubRepo(files)}, rate_bytes_per_s=len(files["model.safetensors"]) / 2)
    cache = tmp_path / "hf"
    cache.mkdir()
    async with serve_hub(hub):
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        monkeypatch.delenv("HF_TOKEN", raising=False)
        options = {"cache_dirs": (cache,), "cache_volumes": ()}
        async with live_app(tmp_path, NODE, "the agent's first frame", **options) as live:
            pilot, app = live.pilot, live.app
            await pilot.press("3")
            listed = app.screen.query_one("#local-model", Select).query_one(OptionList)
            await wait_until(pilot, lambda: listed.option_count == 1, "the node's (no) models")
            app.screen.query_one("#kind", Select).value = "vllm"
            # no vLLM binary on this node: the start after the pull is refused at once
            app.screen.query_one("#runtime", Select).value = "process"
            await type_into(pilot, "#model", REPO)
            await pilot.click("#start")
            question = f"model {REPO} is not on node {NODE}: the engine would download it"
            await wait_until(pilot, lambda: question in asked(pilot), "the question")
            assert not hub.requests  # nothing fetched before the operator said yes
            await pilot.click("#yes")
            # the pull's progress, then the start
            await wait_for_action(pilot, "pull and start failed", "the start after the pull")
            log = "\n".join(app.screen.query_one("#action-log", Log).lines)
            assert f"pulling {REPO}: " in log and " of 2.2 MiB" in log, log
            assert f"pull of {REPO}: {REPO} is in {cache / 'hub'}" in log, log
            await wait_until(pilot, lambda: listed.option_count == 2, "the pulled model offered")
            assert REPO in str(listed.get_option_at_index(1).prompt)
