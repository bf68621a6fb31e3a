"""A real llama-server started through the agent with typed start options: they reach
its command line and the engine behaves by them; its own KV capacity is read back and
put beside the fit estimator's figure, with the difference."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import psutil
import pytest

from agents.client import AgentClient
from agents.config import AgentConfig
from agents.embedded import embedded_agent

from .test_engine_faults import _pid, engines_killed_afterwards

PROMPT = "one two three four five six seven eight nine ten eleven twelve thirteen fourteen"


async def completion(session: aiohttp.ClientSession, url: str) -> dict[str, Any]:
    body = {"prompt": PROMPT, "n_predict": 2}
    async with session.post(f"{url}/completion", json=body) as resp:
        assert resp.status == 200, await resp.text()
        answer: dict[str, Any] = await resp.json()
        return answer


@pytest.mark.docker  # the rig fixture (llama-server binary, tiny model) comes with the rig
async def test_llama_server_runs_the_start_options_and_states_its_kv_capacity(
    rig: object, make_config: Callable[..., AgentConfig]
) -> None:
    model: Path = rig.tiny_model  # type: ignore[attr-defined]
    binary: Path = rig.llama_server_bin  # type: ignore[attr-defined]
    config = make_config(native_binaries={"llamacpp": binary}, model_dirs=(model.parent,))
    launch = {
        "model": str(model),
        "context_len": 100,
        "max_num_seqs": 3,
        "prefix_caching": False,
        "max_batched_tokens": 64,
        "kv_cache_dtype": "q8_0",
    }
    timeout = aiohttp.ClientTimeout(total=30)
    with engines_killed_afterwards(config.state_dir, str(binary)):
        async with (
            embedded_agent(config) as (url, token),
            AgentClient(url, token) as client,
            aiohttp.ClientSession(timeout=timeout) as session,
        ):
            engine = await client.start("llamacpp", launch, runtime="process")
            assert engine.health == "healthy", engine.message
            assert engine.url is not None
            argv = psutil.Process(_pid(config, engine.id)).cmdline()
            assert "--no-cache-prompt" in argv
            assert argv[argv.index("--batch-size") + 1] == "64"
            assert argv[argv.index("--cache-type-k") + 1] == "q8_0"
            assert argv[argv.index("--cache-type-v") + 1] == "q8_0"
            # the engine honours prefix caching off: a repeated prompt reuses no cells
            first, again = (
                await completion(session, engine.url),
                await completion(session, engine.url),
            )
            assert first["timings"]["prompt_n"] > 10
            assert again["timings"]["cache_n"] == 0

            # its own KV capacity (cells per slot x slots, from /props) beside the
            # estimate (context_len x sequences), the difference kept with it
            async with session.get(f"{engine.url}/props") as resp:
                props = json.loads(await resp.read())
            stated = props["default_generation_settings"]["n_ctx"] * props["total_slots"]
            kv = engine.kv_capacity
            assert kv is not None
            assert (kv.reported_tokens, kv.source) == (stated, "/props")
            assert (kv.estimated_tokens, kv.estimate_basis) == (300, "context_len x sequences")
            assert kv.difference_tokens == stated - 300
            (listed,) = await client.engines()
            assert listed.kv_capacity == kv  # over the API, for the TUI and the run record
            await client.stop(engine.id)
