"""Engines: scrape each running deployment with the catalog's adapter every
interval and turn cumulative counters into rates.

An engine's payload is untrusted: a scrape reads at most MAX_PAYLOAD_BYTES,
parses in a worker thread (a huge page must not stall the agent's event loop),
ends within the scraper's deadline, and any failure is that engine's
``scrape_error``, never an exception that costs the other engines their frame."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass, replace
from typing import Any, Protocol

import aiohttp

from agents.runtime import Deployment
from agents.scrape_stats import ScrapeStats
from engines.dialects.prom import MetricsParseError
from engines.sample import EngineSample
from telemetry import EngineTelemetry

log = logging.getLogger(__name__)

MAX_PAYLOAD_BYTES = 4 * 1024 * 1024
"""The most of one metrics page the agent reads (real engines send tens of KiB)."""


class ScrapeSpec(Protocol):
    """The part of the catalog's engine spec a scrape needs."""

    @property
    def metrics_path(self) -> str | None: ...

    @property
    def second_page_path(self) -> str | None: ...

    def parse_metrics(
        self, payload: str | bytes, *, version: str | None = None
    ) -> EngineSample: ...

    def with_second_page(self, sample: EngineSample, payload: str | bytes) -> EngineSample: ...


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


class ScrapeError(Exception):
    """A scrape that produced no page; the message is the engine's scrape_error."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status
        """The HTTP status when the engine answered, but not 200."""


@dataclass(frozen=True, slots=True)
class Scrape:
    """One scrape's outcome: a sample, an error, or both (a sample from the metrics
    page while the engine's second page was unreadable)."""

    sample: EngineSample | None = None
    error: str | None = None
    late: bool = False
    """The frame gave up waiting while the page was still coming (the next frame takes
    it): an engine slow to answer, not one known to have failed."""


class EngineScraper:
    def __init__(self, session: aiohttp.ClientSession, timeout_s: float = 2.0) -> None:
        self.session = session
        self.timeout_s = timeout_s
        """How long a frame waits for an engine's page."""
        self.page_timeout_s = max(4 * timeout_s, 2.0)
        """How long a page may take before the scrape gives it up: longer than a frame
        waits, so a page slower than that still arrives, for the next frame."""
        self._last: dict[str, _Counters] = {}
        self._inflight: dict[str, asyncio.Task[Scrape]] = {}
        """At most one scrape per engine: a parse still running in its thread is waited
        for again next interval rather than joined by another one."""
        self._late: set[str] = set()
        """Engines whose in-flight scrape a frame gave up waiting for: when it has ended
        by the next frame, its page is the freshest there is and that frame takes it."""
        self.stats = ScrapeStats()
        """Each engine's scrape durations and errors, its latest latency histograms."""

    async def _fetch(self, url: str, path: str, headers: dict[str, str]) -> bytes:
        limit_mib = MAX_PAYLOAD_BYTES // 2**20
        too_big = ScrapeError(f"GET {path}: the page is over {limit_mib} MiB (the most read)")
        try:
            timeout = aiohttp.ClientTimeout(total=self.page_timeout_s)
            async with self.session.get(url + path, timeout=timeout, headers=headers) as resp:
                if resp.status != 200:
                    raise ScrapeError(f"GET {path} answered HTTP {resp.status}", resp.status)
                if (resp.content_length or 0) > MAX_PAYLOAD_BYTES:
                    raise too_big
                body = bytearray()
                async for chunk in resp.content.iter_chunked(64 * 1024):
                    body += chunk
                    if len(body) > MAX_PAYLOAD_BYTES:
                        raise too_big
                return bytes(body)
        except TimeoutError:
            raise ScrapeError(f"GET {path}: no answer within {self.page_timeout_s:g} s") from None
        except aiohttp.ClientError as exc:
            raise ScrapeError(f"GET {path}: {exc}") from None

    async def sample(self, dep: Deployment, spec: ScrapeSpec) -> Scrape:
        """One scrape within the deadline; what went wrong is in ``Scrape.error``."""
        path = spec.metrics_path
        if dep.url is None or not path:
            return Scrape()
        task = self._inflight.get(dep.id)
        if task is not None and task.done() and dep.id in self._late:
            # An engine busy enough to answer slower than the deadline (vLLM on a few
            # CPU cores under load) is still read every other frame, not never: the
            # page that came late is this frame's, and the next scrape starts now.
            self._late.discard(dep.id)
            self._start(dep, path, spec)
            return task.result()
        if task is None or task.done():
            task = self._start(dep, path, spec)
        began = time.monotonic()
        try:
            result = await asyncio.wait_for(asyncio.shield(task), self.timeout_s)
        except TimeoutError:
            self._late.add(dep.id)
            result = Scrape(error=f"no complete scrape within {self.timeout_s:g} s", late=True)
        except asyncio.CancelledError:
            if not task.cancelled():
                raise  # the caller itself is cancelled
            # forget() ended the scrape (the engine was stopped while its page was awaited):
            # the frame goes on without it; a CancelledError here ended the agent's sampler
            # for good, and with it every frame after (found by benchmarks/soak.py)
            return Scrape(error="the scrape was ended: the engine is stopping")
        else:
            self._late.discard(dep.id)
        # An engine still loading has no page yet: no fault, so no error counted.
        failed = result.error is not None and dep.state == "ready"
        self.stats.observe(dep.id, dep.kind, time.monotonic() - began, failed)
        return result

    def _start(self, dep: Deployment, path: str, spec: ScrapeSpec) -> asyncio.Task[Scrape]:
        assert dep.url is not None
        task = asyncio.get_running_loop().create_task(self._scrape(dep, dep.url, path, spec))
        self._inflight[dep.id] = task
        return task

    async def _scrape(
        self, dep: Deployment, url: str, metrics_path: str, spec: ScrapeSpec
    ) -> Scrape:
        headers = {}
        if dep.config.get("api_key"):
            headers["Authorization"] = f"Bearer {dep.config['api_key']}"
        second: bytes | None = None
        second_error: str | None = None
        try:
            metrics = await self._fetch(url, metrics_path, headers)
            if spec.second_page_path:
                try:
                    second = await self._fetch(url, spec.second_page_path, headers)
                except ScrapeError as exc:
                    # An HTTP error: an engine started without that page (llama.cpp
                    # without --slots, TensorRT-LLM before 1.1), no fault of this scrape.
                    second_error = None if exc.status else str(exc)
        except ScrapeError as exc:
            log.debug("scrape %s: %s", dep.id, exc)
            return Scrape(error=str(exc))
        scrape = await asyncio.to_thread(_parse, dep.id, spec, metrics, second, dep.engine_version)
        return scrape if second_error is None else replace(scrape, error=second_error)

    def telemetry(self, dep: Deployment, scrape: Scrape) -> EngineTelemetry:
        sample = scrape.sample
        base: dict[str, Any] = {
            "id": dep.id,
            "kind": dep.kind,
            "state": dep.state,
            "health": dep.health,
            "simulated": dep.simulated,
            "url": dep.url,
            "scrape_error": scrape.error,
            "exit_code": dep.exit_code,
            "last_log_line": dep.last_log_line,
            "model": dep.model,
            "runtime": dep.runtime,
            "gpu_ids": dep.gpu_ids,
            "port": dep.port,
            "started_at": dep.started_at,
        }
        if sample is None:
            return EngineTelemetry(**base)
        self.stats.latencies(dep.id, dep.kind, sample)
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
        self.stats.forget(dep_id)
        self._late.discard(dep_id)
        task = self._inflight.pop(dep_id, None)
        if task is not None:
            task.cancel()

    async def close(self) -> None:
        """End scrapes still in flight (their engines' pages are no one's concern now)."""
        tasks = list(self._inflight.values())
        self._inflight.clear()
        self._late.clear()
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


def _parse(
    dep_id: str, spec: ScrapeSpec, metrics: bytes, second: bytes | None, version: str | None
) -> Scrape:
    """Runs in a worker thread.  Anything a parser raises is this engine's error: a
    MetricsParseError says what the payload got wrong, anything else is a parser bug
    met by odd data (logged with its traceback).  Without the second page, the metrics
    page still counts.  ``version``: the running engine's, whose series names the
    parser reads."""
    try:
        sample = spec.parse_metrics(metrics, version=version)
    except Exception as exc:
        return Scrape(error=_parse_failure(dep_id, exc))
    if second is None:
        return Scrape(sample)
    try:
        return Scrape(spec.with_second_page(sample, second))
    except Exception as exc:
        return Scrape(sample, _parse_failure(dep_id, exc))


def _parse_failure(dep_id: str, exc: Exception) -> str:
    if isinstance(exc, MetricsParseError):
        log.debug("scrape %s: %s", dep_id, exc)
        return str(exc)
    log.warning("scrape %s: the parser failed on this payload", dep_id, exc_info=exc)
    return f"the parser failed on this payload ({type(exc).__name__}: {exc})"
