"""The Engines screen's start wait (control.engine_ops.wait_healthy) follows the agent's
own health budget for that start, so a 15-minute model load is not given up at 5 minutes,
and the operator sees the engine's last log line while waiting.  A fake clock stands for
the minutes; the agent is a scripted stand-in answering ``engines()``."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from agents.protocol import EngineInfo, ImagePull
from control import engine_ops
from control.engine_ops import EngineFailed, wait_healthy


class ScriptedAgent:
    """Answers ``engines()`` with the next scripted state."""

    def __init__(self, states: Sequence[tuple[str, str]], budget_s: float | None) -> None:
        self.states, self.budget_s, self.calls = list(states), budget_s, 0

    async def engines(self) -> list[EngineInfo]:
        state, health = self.states[min(self.calls, len(self.states) - 1)]
        self.calls += 1
        info = EngineInfo(
            "e1", "vllm", "compose", state, health, start_timeout_s=self.budget_s,
            last_log_line="Loading safetensors checkpoint shards: 40% Completed",
        )  # fmt: skip
        return [info]


@pytest.fixture
def fake_clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Each poll's sleep moves the clock 100 s."""
    now = [0.0]

    async def sleep(_: float) -> None:
        now[0] += 100.0

    monkeypatch.setattr(engine_ops.time, "monotonic", lambda: now[0])
    monkeypatch.setattr(engine_ops.asyncio, "sleep", sleep)
    return now


async def test_a_long_load_is_followed_as_long_as_the_agent_allows(fake_clock: list[float]) -> None:
    # vLLM's spec allows 1815 s; the engine turns healthy after about 900 s.
    agent = ScriptedAgent([("loading", "loading")] * 9 + [("ready", "healthy")], 1815.0)
    seen: list[str] = []
    info = await wait_healthy(agent, "e1", lambda text, _: seen.append(text))
    assert info.health == "healthy" and fake_clock[0] == 900
    assert any("Loading safetensors checkpoint shards" in text for text in seen)


async def test_the_wait_ends_after_the_agents_budget_and_says_how_long(
    fake_clock: list[float],
) -> None:
    agent = ScriptedAgent([("loading", "loading")], 200.0)
    with pytest.raises(EngineFailed, match=r"not healthy after \d+s \(loading\)"):
        await wait_healthy(agent, "e1", lambda *_: None)
    # given up at the first poll past budget + margin (230 s), not at a fixed 300 s
    assert fake_clock[0] == 300


class PullingAgent:
    """An engine whose image is pulled first (as the agent reports it: ``image_pull`` and
    its words in ``message``), then healthy."""

    def __init__(self, pulls: Sequence[ImagePull]) -> None:
        self.pulls, self.calls = list(pulls), 0

    async def engines(self) -> list[EngineInfo]:
        self.calls += 1
        if self.calls > len(self.pulls):
            return [EngineInfo("e1", "vllm", "compose", "ready", "healthy", start_timeout_s=900)]
        pull = self.pulls[self.calls - 1]
        info = EngineInfo(
            "e1", "vllm", "compose", "starting", "unknown", start_timeout_s=900,
            message=pull.describe(), image_pull=pull,
        )  # fmt: skip
        return [info]


async def test_an_image_pull_moves_the_bar_by_its_bytes_and_says_so(
    fake_clock: list[float],
) -> None:
    mib = 1024 * 1024
    pulls = [
        ImagePull("vllm/vllm-openai:v0.11.0", "pulling", 0, None, 0, 3),
        ImagePull("vllm/vllm-openai:v0.11.0", "pulling", 512 * mib, 2048 * mib, 1, 3),
        ImagePull("vllm/vllm-openai:v0.11.0", "pulling", 1536 * mib, 2048 * mib, 2, 3),
    ]
    seen: list[tuple[str, float | None]] = []
    await wait_healthy(PullingAgent(pulls), "e1", lambda text, f: seen.append((text, f)))
    pulling = [(text, f) for text, f in seen if "pulling image" in text]
    assert [f for _, f in pulling] == [None, 0.25, 0.75]
    assert "512 of 2,048 MiB, 1 of 3 layers done" in pulling[1][0]
