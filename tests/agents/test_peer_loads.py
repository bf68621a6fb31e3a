"""The agent's part in distributed runs (two real agents on loopback, a simulated engine):
a load run against an engine on another agent goes through that agent's proxy with its
token and only when that agent answers for the engine; a run's start waits for the
``start_at`` it is given on the node's clock; ``/v1/clock`` reads the node's clock. The
multi-host proof with a real llama-server is tests/fleet/test_distributed.py."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import aiohttp
import pytest

from agents.client import AgentClient, AgentError
from agents.config import AgentConfig
from agents.embedded import embedded_agent
from loadgen.profiles import LoadSpec, concurrency_sweep
from loadgen.setup import plain
from runs.events import RunFinished, RunStarted
from runs.records import RequestRecord

from .test_loadruns import SIM, WORKLOAD, events_of, served_model

SPEC = plain(LoadSpec(levels=concurrency_sweep([2]), requests_per_level=4))


async def test_a_run_against_another_agents_engine_goes_through_its_proxy(
    make_config: Callable[..., AgentConfig], tmp_path: Path
) -> None:
    engine_side = make_config(
        node_name="b", token="token-of-b-0123456789", state_dir=tmp_path / "b"
    )
    async with (
        embedded_agent(engine_side) as (b_url, b_token),
        embedded_agent(make_config(node_name="a")) as (a_url, a_token),
        AgentClient(b_url, b_token) as b,
        AgentClient(a_url, a_token) as a,
    ):
        engine = await b.start("sim", SIM)
        model = await _model(b_url, b_token, engine.id)
        run = await a.start_peer_load(b_url, b_token, engine.id, SPEC, WORKLOAD, model=model)
        events = [e for _, e in await events_of(a, run.run_id)]
    started, ended = events[0], events[-1]
    assert isinstance(started, RunStarted) and isinstance(ended, RunFinished)
    assert (started.setup.load_node, started.setup.node, started.setup.path) == (
        "a",
        "b",
        "proxied",
    )
    assert started.setup.url == f"{b_url}/v1/engines/{engine.id}/proxy/v1"
    records = [e for e in events if isinstance(e, RequestRecord)]
    assert len(records) == 4 and all(r.ok for r in records)
    # b's token went to a's worker only: a's run log on disk does not hold it.
    [log] = (tmp_path / "state" / "loads").glob("*.jsonl")
    assert b_token not in log.read_text()


async def _model(url: str, token: str, engine_id: str) -> str:
    """The model the engine serves, asked through its agent's proxy."""
    async with (
        aiohttp.ClientSession() as http,
        http.get(
            f"{url}/v1/engines/{engine_id}/proxy/v1/models",
            headers={"Authorization": f"Bearer {token}"},
        ) as resp,
    ):
        return str((await resp.json())["data"][0]["id"])


@pytest.mark.parametrize("bad", ["wrong-token", "not-an-agent", "not-a-base-url"])
async def test_a_peer_that_does_not_answer_for_the_engine_with_the_token_is_refused(
    make_config: Callable[..., AgentConfig], tmp_path: Path, bad: str
) -> None:
    engine_side = make_config(
        node_name="b", token="token-of-b-0123456789", state_dir=tmp_path / "b"
    )
    async with (
        embedded_agent(engine_side) as (b_url, b_token),
        embedded_agent(make_config(node_name="a")) as (a_url, a_token),
        AgentClient(b_url, b_token) as b,
        AgentClient(a_url, a_token) as a,
    ):
        engine = await b.start("sim", SIM)
        url, token = {
            "wrong-token": (b_url, "not-b-s-token"),
            "not-an-agent": (str(engine.url), b_token),  # the engine itself answers HTTP
            "not-a-base-url": (f"{b_url}/v1/engines/{engine.id}/proxy/v1", b_token),
        }[bad]
        with pytest.raises(AgentError) as refused:
            await a.start_peer_load(url, token, engine.id, SPEC, WORKLOAD, model="m")
        assert await a.loads() == []
    words = "base URL" if bad == "not-a-base-url" else "did not answer for engine"
    assert refused.value.status == (400 if bad == "not-a-base-url" else 502)
    assert words in refused.value.message


async def test_a_run_given_start_at_sends_nothing_before_it_on_the_nodes_clock(
    agent: tuple[str, AgentClient],
) -> None:
    url, client = agent
    engine = await client.start("sim", SIM)
    model = await served_model(url, engine.id)
    asked_at = time.time()
    node_now = await client.clock()
    # one machine: the node's clock is ours, read between the ask and the answer (a busy
    # box can take seconds to answer; 1 ms for the stamps' rounding)
    assert asked_at - 0.001 <= node_now <= time.time() + 0.001
    start_at = node_now + 3.0
    run = await client.start_load(engine.id, SPEC, WORKLOAD, model=model, start_at=start_at)
    records = [e for _, e in await events_of(client, run.run_id) if isinstance(e, RequestRecord)]
    assert len(records) == 4
    # Nothing before start_at. After it, only a bound that the run did start: on a busy
    # 2-core box the first send came 6.2 s after start_at (1 s was the bound before).
    assert start_at <= min(r.sent_at for r in records) < start_at + 30.0
    with pytest.raises(AgentError) as too_late:
        await client.start_load(engine.id, SPEC, WORKLOAD, model=model, start_at=node_now + 3600)
    assert too_late.value.status == 400 and "measure the clock offset" in too_late.value.message
