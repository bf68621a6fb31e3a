"""The simulated engine in real time: one engine-loop task plus generation handlers.

The engine loop runs ``Scheduler.step()`` and sleeps until each step's end
(virtual seconds × ``time_scale``), then hands the step's tokens to each
request's queue; handlers turn them into SSE chunks (or Ollama NDJSON).  The
recorded ground truth is therefore the scheduler's own timeline.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from aiohttp import web

from sim.faults import FaultConfig, RequestFaults, faults_for
from sim.metrics import SimMetrics
from sim.openai_api import (
    BadRequest,
    GenRequest,
    Shaper,
    error_body,
    ollama_final,
    ollama_line,
    parse_request,
    usage,
)
from sim.profile import SimProfile
from sim.scheduler import Arrival, RequestTrace, Scheduler, StepResult
from sim.textgen import LengthPlan, block_hashes, output_words, plan_output

GROUND_TRUTH_TOKEN_LIMIT = 1_000_000
"""Token times kept as ground truth (about 32 MB); a long demo drops the oldest traces."""


@dataclass(slots=True)
class _Live:
    index: int
    request: web.Request
    plan: LengthPlan
    faults: RequestFaults
    queue: asyncio.Queue[tuple[str, int]] = field(default_factory=asyncio.Queue)
    ended: RequestTrace | None = None


class SimServer:
    """One simulated engine; ``RunningSim`` (``sim.app``) serves it over HTTP."""

    def __init__(
        self,
        profile: SimProfile,
        *,
        seed: int = 0,
        time_scale: float | None = None,
        faults: FaultConfig | None = None,
    ) -> None:
        self.profile = profile
        self.seed = seed
        self.time_scale = profile.time_scale if time_scale is None else time_scale
        if not self.time_scale > 0:
            raise ValueError("time_scale must be > 0")
        self.faults = faults or FaultConfig()
        self.load_time_s = (
            profile.load_time_s if self.faults.load_time_s is None else self.faults.load_time_s
        )
        self.sched = Scheduler(profile)
        self.metrics = SimMetrics()
        self.loaded = asyncio.Event()
        self.crashed = False
        self.on_crash: Callable[[], None] | None = None
        self.max_lag_s = 0.0
        """Largest delay of a step's delivery behind its scheduled real time."""
        self.started_epoch = time.time()
        self._t0 = 0.0
        self._wake = asyncio.Event()
        self._live: dict[str, _Live] = {}
        self._ended: deque[RequestTrace] = deque()
        self._ended_tokens = 0
        """Oldest traces let go to keep memory bounded (see GROUND_TRUTH_TOKEN_LIMIT)."""
        self._notes: dict[str, str] = {}
        self._count = 0
        self._tasks: list[asyncio.Task[None]] = []

    # ---- clocks --------------------------------------------------------
    def vnow(self) -> float:
        return (asyncio.get_running_loop().time() - self._t0) / self.time_scale

    def epoch_of(self, virtual_s: float) -> float:
        return self.started_epoch + virtual_s * self.time_scale

    def ground_truth(self, *, clock: str = "virtual") -> list[RequestTrace]:
        """Every ended request's true schedule, in arrival order.

        ``clock="virtual"``: the model's seconds from engine start (compare with
        ``simulate``); ``clock="epoch"``: Unix seconds a client measures.
        """
        traces = sorted(self._ended, key=lambda t: (t.arrival_s, t.request_id))
        if clock == "virtual":
            return traces
        if clock != "epoch":
            raise ValueError("clock must be 'virtual' or 'epoch'")
        e = self.epoch_of
        return [
            replace(
                t,
                arrival_s=e(t.arrival_s),
                scheduled_s=None if t.scheduled_s is None else e(t.scheduled_s),
                token_times_s=tuple(e(x) for x in t.token_times_s),
                finished_s=None if t.finished_s is None else e(t.finished_s),
            )
            for t in traces
        ]

    # ---- lifecycle -----------------------------------------------------
    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._t0 = loop.time()
        self.started_epoch = time.time()
        self._tasks = [loop.create_task(self._engine_loop()), loop.create_task(self._load())]

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _load(self) -> None:
        await asyncio.sleep(self.load_time_s)
        self.loaded.set()

    def crash(self) -> None:
        """Die like a crashed engine: every stream cut, the listener closed."""
        self.crashed = True
        for live in self._live.values():
            if live.request.transport is not None:
                live.request.transport.abort()
        for task in self._tasks:
            task.cancel()
        if self.on_crash is not None:
            self.on_crash()

    # ---- the engine loop -----------------------------------------------
    async def _engine_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            if not self.sched.has_work():
                self._wake.clear()
                await self._wake.wait()
                continue
            result = self.sched.step()
            if result is None:
                continue
            for trace in result.failed:
                self._finish(trace)
            due = self._t0 + result.end_s * self.time_scale
            delay = due - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            else:
                self.max_lag_s = max(self.max_lag_s, -delay)
                await asyncio.sleep(0)
            self._deliver(result)

    def _deliver(self, result: StepResult) -> None:
        self.metrics.observe_step(result, self.sched)
        for rid, index in result.emitted:
            live = self._live.get(rid)
            if live is not None:
                live.queue.put_nowait(("token", index))
        for trace in result.finished:
            self._finish(trace)

    def _finish(self, trace: RequestTrace) -> None:
        live = self._live.get(trace.request_id)
        note = self._notes.pop(trace.request_id, "")
        if note:
            trace = replace(trace, detail=f"{trace.detail}; {note}" if trace.detail else note)
        self._ended.append(trace)
        self._ended_tokens += trace.output_tokens + 1
        while self._ended_tokens > GROUND_TRUTH_TOKEN_LIMIT and len(self._ended) > 1:
            old = self._ended.popleft()
            self._ended_tokens -= old.output_tokens + 1
        reason = live.plan.finish_reason if live is not None else "abort"
        self.metrics.observe_end(trace, reason, self.profile.prefill_tok_s)
        if live is not None:
            live.ended = trace
            live.queue.put_nowait(("end", 0))

    # ---- generation ----------------------------------------------------
    def _json_error(self, message: str, status: int) -> web.Response:
        kind = "invalid_request_error" if status < 500 else "server_error"
        return web.json_response(error_body(message, status, kind), status=status)

    async def generate(self, request: web.Request, api: str) -> web.StreamResponse:
        if self.profile.spec.loading_status == 200:
            await self.loaded.wait()  # it loads the model on demand: the request waits
        try:
            req = parse_request(api, await request.read())
        except BadRequest as exc:
            return self._json_error(str(exc), exc.status)
        p = self.profile
        if req.model and req.model != p.model and p.spec.checks_model_name:
            return self._json_error(f"The model `{req.model}` does not exist.", 404)
        n_prompt = len(req.prompt_tokens)
        if req.max_tokens is not None and n_prompt + req.max_tokens > p.max_model_len:
            return self._json_error(
                f"This model's maximum context length is {p.max_model_len} tokens. However, you "
                f"requested {n_prompt + req.max_tokens} tokens ({n_prompt} in the messages, "
                f"{req.max_tokens} in the completion).",
                400,
            )
        index = self._count
        self._count += 1
        if self.faults.crash_after is not None and index >= self.faults.crash_after:
            self.crash()
            if request.transport is not None:
                request.transport.abort()
            return web.Response(status=500)
        rng = random.Random(f"{self.seed}:{index}:length")
        plan = plan_output(
            p,
            rng,
            max_tokens=req.max_tokens,
            ignore_eos=req.ignore_eos,
            min_tokens={"min_tokens": req.min_tokens, "min_new_tokens": req.min_new_tokens},
        )
        prefix = "chatcmpl" if api in ("chat", "ollama_chat") else "cmpl"
        rid = f"{prefix}-sim{self.seed}-{index}"
        fate = faults_for(self.faults, self.seed, index, plan.tokens)
        self.metrics.requests_received += 1
        if fate.error:
            return self._json_error("simulated engine error (fault injection)", 500)
        tokens = req.prompt_tokens
        arrival = Arrival(
            rid,
            self.vnow(),
            len(tokens),
            plan.tokens,
            block_hashes(tokens, p.kv_block_size_tokens) if p.prefix_caching else (),
        )
        refused = self.sched.add(arrival)
        if refused is not None:
            self._finish(refused)
            status = 503 if "busy" in refused.detail else 400
            return self._json_error(refused.detail, status)
        live = _Live(index, request, plan, fate)
        self._live[rid] = live
        self._wake.set()
        try:
            return await self._respond(request, req, rid, live)
        finally:
            if live.ended is None and not self.crashed:
                aborted = self.sched.abort(rid, self.vnow(), "client disconnected")
                if aborted is not None:
                    self._finish(aborted)
            self._live.pop(rid, None)

    async def _respond(
        self, request: web.Request, req: GenRequest, rid: str, live: _Live
    ) -> web.StreamResponse:
        p = self.profile
        words = output_words(self.seed, live.index, live.plan.tokens)
        model = req.model or p.model
        llamacpp = p.spec.dialect == "llamacpp"
        shaper = Shaper(req.api, rid, model, int(time.time()), llamacpp)
        ollama = req.api.startswith("ollama")
        resp: web.StreamResponse | None = None
        # One serialisation per response; each token only splices its text in.
        marker = _MARKER
        sample = ollama_line(req.api, model, marker) if ollama else shaper.token(marker)
        head, tail = _encode(sample, ollama).split(json.dumps(marker).encode())
        buf = bytearray()
        sent = 0
        ended = False
        while not ended:
            events = [await live.queue.get()]
            while not live.queue.empty():  # a late reader catches up in one write
                events.append(live.queue.get_nowait())
            for kind, index in events:
                if kind == "end":
                    ended = True
                    break
                if resp is None and req.stream:
                    resp = await self._open_stream(request, ollama)
                    role = shaper.role()
                    if role is not None and not ollama:
                        buf += _encode(role, ollama)
                if resp is not None:
                    buf += head + json.dumps(words[index]).encode() + tail
                sent += 1
                if live.faults.stall_after_tokens == sent:
                    await _flush(resp, buf)
                    self._notes[rid] = f"fault: stalled {self.faults.stall_s}s after {sent} tokens"
                    await asyncio.sleep(self.faults.stall_s)
                if live.faults.drop_after_tokens == sent:
                    await _flush(resp, buf)
                    self._notes[rid] = f"fault: connection dropped after {sent} tokens"
                    aborted = self.sched.abort(rid, self.vnow(), "fault: dropped")
                    if aborted is not None:
                        self._finish(aborted)
                    if request.transport is not None:
                        request.transport.abort()
                    return resp or web.Response(status=500)
            await _flush(resp, buf)
        trace = live.ended
        assert trace is not None
        if trace.outcome != "ok":
            message = f"request failed: {trace.detail or trace.outcome}"
            if resp is None:
                return self._json_error(message, 503)
            if request.transport is not None:
                request.transport.abort()
            return resp
        return await self._close_response(request, req, resp, shaper, trace, words, live.plan)

    async def _close_response(
        self,
        request: web.Request,
        req: GenRequest,
        resp: web.StreamResponse | None,
        shaper: Shaper,
        trace: RequestTrace,
        words: list[str],
        plan: LengthPlan,
    ) -> web.StreamResponse:
        p = self.profile
        n_out = trace.output_tokens
        use = usage(trace.prompt_tokens, n_out, trace.cached_tokens)
        scale = self.time_scale
        first, last = trace.token_times_s[0], trace.token_times_s[-1]
        if req.api.startswith("ollama"):
            reason = "length" if plan.finish_reason == "length" else "stop"
            final = ollama_final(
                req.api,
                req.model or p.model,
                reason,
                prompt=trace.prompt_tokens,
                completion=n_out,
                prompt_s=(first - (trace.scheduled_s or trace.arrival_s)) * scale,
                eval_s=(last - first) * scale,
                total_s=(last - trace.arrival_s) * scale,
                load_s=0.0,
            )
            if resp is None:
                final["message" if req.api == "ollama_chat" else "response"] = (
                    {"role": "assistant", "content": "".join(words)}
                    if req.api == "ollama_chat"
                    else "".join(words)
                )
                return web.json_response(final)
            await self._ndjson(resp, final)
            await resp.write_eof()
            return resp
        if resp is None:
            return web.json_response(shaper.whole("".join(words), plan.finish_reason, use))
        await self._sse(resp, shaper.finish(plan.finish_reason))
        if req.include_usage:
            extra = {}
            if p.spec.dialect == "llamacpp":
                extra["timings"] = {
                    "cache_n": trace.cached_tokens,
                    "prompt_n": trace.prompt_tokens - trace.cached_tokens,
                    "predicted_n": n_out,
                    "predicted_ms": (last - first) * scale * 1000.0,
                }
            await self._sse(resp, shaper.usage_chunk(use, **extra))
        await resp.write(b"data: [DONE]\n\n")
        if p.close_after_stream:
            # Headers are out without "Connection: close": the client's pool learns of
            # the close only when it reuses the connection, as with a real llama-server.
            resp.force_close()
        await resp.write_eof()
        return resp

    async def _open_stream(self, request: web.Request, ollama: bool) -> web.StreamResponse:
        resp = web.StreamResponse(
            headers={
                "Content-Type": "application/x-ndjson" if ollama else "text/event-stream",
                "Cache-Control": "no-cache",
            }
        )
        await resp.prepare(request)
        return resp

    @staticmethod
    async def _sse(resp: web.StreamResponse, obj: object) -> None:
        await resp.write(_encode(obj, False))

    @staticmethod
    async def _ndjson(resp: web.StreamResponse, obj: object) -> None:
        await resp.write(_encode(obj, True))


_MARKER = "\ue000sim-token\ue000"


def _encode(obj: object, ollama: bool) -> bytes:
    """One SSE event (``data: ...``) or, for Ollama's native API, one NDJSON line."""
    text = json.dumps(obj, separators=(",", ":")).encode()
    return text + b"\n" if ollama else b"data: " + text + b"\n\n"


async def _flush(resp: web.StreamResponse | None, buf: bytearray) -> None:
    if resp is not None and buf:
        await resp.write(bytes(buf))
        buf.clear()
