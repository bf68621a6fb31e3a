"""Engines: scrape each running deployment with the catalog's adapter every
interval and turn cumulative counters into rates."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any, Protocol

import aiohttp

from agents.protocol import EngineTelemetry
from agents.runtime import Deployment
from engines.sample import EngineSample

log = logging.getLogger(__name__)


class ScrapeSpec(Protocol):
    """The part of the catalog's engine spec a scrape needs."""

    @property
    def metrics_path(self) -> str | None: ...

    def parse_metrics(self, payload: str | bytes) -> EngineSample: ...


@dataclass(frozen=True, slots=True)
class _Counters:
    ts: float
    prompt: float | None
    generation: float | None


def _rate(now: float | None, before: float | None, dt: float) -> float | None:
    if now is None or before is None or dt <= 0:
        return None
    # A counter that went down means the engine restarted: no rate this interval.
    return (now - before) / dt if now >= before else None


class EngineScraper:
    def __init__(self, session: aiohttp.ClientSession, timeout_s: float = 2.0) -> None:
        self.session = session
        self.timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._last: dict[str, _Counters] = {}

    async def _get(self, url: str, headers: dict[str, str]) -> bytes:
        async with self.session.get(url, timeout=self.timeout, headers=headers) as resp:
            if resp.status != 200:
                raise aiohttp.ClientResponseError(
                    resp.request_info, (), status=resp.status, message=f"HTTP {resp.status}"
                )
            return await resp.read()

    async def sample(self, dep: Deployment, spec: ScrapeSpec) -> EngineSample | None:
        """One normalised sample; None when the engine does not answer (the frame says so)."""
        if dep.url is None or not spec.metrics_path:
            return None
        headers = {}
        if dep.config.get("api_key"):
            headers["Authorization"] = f"Bearer {dep.config['api_key']}"
        try:
            payload = await self._get(dep.url + spec.metrics_path, headers)
            sample = spec.parse_metrics(payload)
            if dep.kind == "llamacpp" or dep.config.get("dialect") == "llamacpp":
                sample = await self._with_slots(dep.url, headers, sample)
        except (TimeoutError, aiohttp.ClientError, ValueError) as exc:
            log.debug("scrape %s: %s", dep.id, exc)
            return None
        return sample

    async def _with_slots(
        self, url: str, headers: dict[str, str], sample: EngineSample
    ) -> EngineSample:
        from engines.llamacpp_slots import merge_llamacpp, parse_llamacpp_slots

        try:
            return merge_llamacpp(
                sample, parse_llamacpp_slots(await self._get(url + "/slots", headers))
            )
        except (TimeoutError, aiohttp.ClientError, ValueError):
            return sample  # /slots is optional (--slots); /metrics alone still counts

    def telemetry(self, dep: Deployment, sample: EngineSample | None) -> EngineTelemetry:
        base: dict[str, Any] = {
            "id": dep.id,
            "kind": dep.kind,
            "state": dep.state,
            "health": dep.health,
            "simulated": dep.simulated,
            "url": dep.url,
        }
        if sample is None:
            return EngineTelemetry(**base)
        now = time.monotonic()
        generation = sample.generation_tokens_total
        if generation is not None and sample.generation_tokens_in_flight is not None:
            # llama.cpp counts tokens only when a request ends; in-flight keeps the rate live.
            generation += sample.generation_tokens_in_flight
        current = _Counters(now, sample.prompt_tokens_total, generation)
        before = self._last.get(dep.id)
        self._last[dep.id] = current
        dt = now - before.ts if before else 0.0
        return EngineTelemetry(
            **base,
            kv_cache_usage=sample.kv_cache_usage,
            kv_cache_usage_is_estimate=sample.kv_cache_usage_is_estimate,
            requests_running=sample.requests_running,
            requests_waiting=sample.requests_waiting,
            prompt_tok_s=_rate(current.prompt, before.prompt if before else None, dt),
            generation_tok_s=_rate(current.generation, before.generation if before else None, dt),
            ttft_p50_s=sample.ttft.quantile_s(0.5) if sample.ttft else None,
            itl_p50_s=(
                sample.inter_token_latency.quantile_s(0.5) if sample.inter_token_latency else None
            ),
            preemptions_total=sample.preemptions_total,
            prefix_cache_hit_rate=sample.prefix_cache_hit_rate,
        )

    def forget(self, dep_id: str) -> None:
        self._last.pop(dep_id, None)
