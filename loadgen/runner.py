"""Run a load profile against one OpenAI-compatible endpoint.

``run_load`` runs in the caller's event loop; the TUI uses
``run_load_in_subprocess`` (``loadgen.subproc``) so its own loop never
runs the client.  Every finished request goes to the sink at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass
from itertools import pairwise

# A module import (not names): loadgen.openai_stream imports this package's
# records, so either side may be imported first.
from loadgen import openai_stream
from loadgen.process import RunClock, ensure_fd_limit, new_run_id
from loadgen.profiles import ClosedLoop, Level, LoadSpec, OpenLoop
from loadgen.quirks import LoadQuirks, quirks_for
from loadgen.setup import describe_run
from loadgen.sinks import RecordSink
from loadgen.sizing import sized_prompts
from loadgen.stats import LevelTally, StridedSample, quantile
from loadgen.workload import PromptItem, PromptSource, Workload
from runs.events import (
    LevelFinished,
    LevelProgress,
    LevelStarted,
    RunEvent,
    RunFinished,
    RunResult,
    RunStarted,
)
from runs.records import LevelSummary, RequestRecord
from runs.setup import RunSetup

PROGRESS_INTERVAL_S = 0.5
UNCAPPED_FD_STREAMS = 8192
LIVE_RATE_WINDOW_S = 5.0

ProgressCallback = Callable[[RunEvent], None]
"""Takes every event of the run, finished requests included (``runs.events``)."""


@dataclass(frozen=True, slots=True)
class Target:
    url: str
    """Base URL of the engine (``http://host:port`` or ``.../v1``)."""
    model: str
    engine_kind: str = "openai"
    api_key: str | None = None
    chat: bool = True
    through_proxy: bool = False
    """``url`` is an agent's proxy route, not the engine: the agent keeps the client's
    connection alive whatever the engine does after a stream, so connections are reused
    (a fresh one per request costs a connect and a close on both hosts)."""

    @property
    def reuses_connections(self) -> bool:
        """Whether a pooled socket survives between this target's requests."""
        return quirks_for(self.engine_kind).reuse_connections or self.through_proxy

    def __repr__(self) -> str:  # never print a key into logs
        key = "None" if self.api_key is None else "'***'"
        return (
            f"Target(url={self.url!r}, model={self.model!r}, engine_kind={self.engine_kind!r}, "
            f"api_key={key}, chat={self.chat})"
        )


async def run_load(
    spec: LoadSpec,
    workload: Workload,
    target: Target,
    sink: RecordSink,
    on_progress: ProgressCallback | None = None,
    *,
    run_id: str | None = None,
    setup: RunSetup | None = None,
    start_at: float | None = None,
) -> RunResult:
    """Run every level of ``spec`` in turn; the caller closes ``sink``.

    ``setup`` is what ``RunStarted`` carries to the recorder (``describe_run``:
    the caller adds who started the run, where); without one the run is a
    script's, with no node. ``start_at`` (epoch seconds on this machine's clock) holds
    the first request back until then, once the client is ready: the agents of a
    distributed run start together."""
    emit = on_progress or (lambda _event: None)
    run_id = run_id or new_run_id()
    quirks = quirks_for(target.engine_kind)
    # Uncapped open loops: room for a server that stalls while arrivals go on.
    fds = ensure_fd_limit(spec.max_in_flight or UNCAPPED_FD_STREAMS)
    # a bad dataset fails here, before any request; sizing asks the engine's tokenizer
    sized = await sized_prompts(workload, target)
    prompts = sized.source
    warnings = tuple(w for w in (quirks.length_warning(), fds, sized.warning) if w)
    clock = RunClock()
    setup = setup or describe_run(spec, workload, target, origin="script")
    setup = sized.describe(setup)
    emit(RunStarted(run_id, len(spec.levels), warnings, setup, clock.wall0))
    headers = {"Authorization": f"Bearer {target.api_key}"} if target.api_key else None
    limits = openai_stream.ClientLimits(
        concurrency=spec.max_in_flight,
        request_timeout_s=spec.request_timeout_s,
        stall_timeout_s=spec.stall_timeout_s,
        reuse_connections=target.reuses_connections,
    )
    summaries: list[LevelSummary] = []
    written = 0
    async with contextlib.AsyncExitStack() as stack:
        stack.callback(prompts.close)
        client = await stack.enter_async_context(openai_stream.StreamClient(limits, headers))
        if start_at is not None:
            await asyncio.sleep(max(0.0, start_at - time.time()))
        for index, level in enumerate(spec.levels):
            runner = _LevelRun(
                run_id,
                index,
                level,
                spec,
                target,
                quirks,
                client,
                prompts,
                sink,
                clock,
                emit,
                first_number=written,
            )
            summary = await runner.run()
            written += runner.finished
            sink.level(summary)
            summaries.append(summary)
            emit(LevelFinished(summary))
    result = RunResult(
        run_id, clock.wall0, clock.epoch(time.perf_counter()), tuple(summaries), warnings, written
    )
    emit(RunFinished(result))
    return result


class _LevelRun:
    def __init__(
        self,
        run_id: str,
        index: int,
        level: Level,
        spec: LoadSpec,
        target: Target,
        quirks: LoadQuirks,
        client: openai_stream.StreamClient,
        prompts: PromptSource,
        sink: RecordSink,
        clock: RunClock,
        emit: ProgressCallback,
        *,
        first_number: int,
    ) -> None:
        self.run_id, self.index, self.level, self.spec = run_id, index, level, spec
        self.target, self.quirks, self.client, self.prompts = target, quirks, client, prompts
        self.sink, self.clock, self.emit = sink, clock, emit
        self.url = openai_stream.endpoint_url(target.url, target.chat)
        self.first_number = first_number
        self.tally = LevelTally(index, level, spec.slo)
        """The level's summary so far: no record is kept (a long level would not fit)."""
        self.finished = 0
        self.issued = 0
        self.measured_issued = 0
        self.in_flight = 0
        self.start = time.perf_counter()
        self.measure_start: float | None = None
        self.errors: Counter[str] = Counter()
        self.cut = 0
        self.tasks: set[asyncio.Task[None]] = set()
        self.ttfts = StridedSample()
        self.itls = StridedSample()
        self.token_marks: deque[tuple[float, int]] = deque()

    # -- when to stop -------------------------------------------------------
    def _is_warmup(self, at: float) -> bool:
        by_count = self.issued < self.spec.warmup_requests
        return by_count or at < self.start + self.spec.warmup_s

    def _deadline(self) -> float | None:
        if self.spec.duration_s is None:
            return None
        begin = self.measure_start
        if begin is None:  # still warming up: at least until warm-up can end
            return None
        return begin + self.spec.duration_s

    def _may_issue(self, at: float) -> bool:
        count = self.spec.requests_for(self.level)
        if count is not None and self.measured_issued >= count:
            return False
        deadline = self._deadline()
        return deadline is None or at < deadline

    def _claim(self, at: float) -> tuple[int, bool] | None:
        """Take the next request slot, or None when the level stops sending."""
        if not self._may_issue(at):
            return None
        warmup = self._is_warmup(at)
        if not warmup:
            if self.measure_start is None:
                self.measure_start = at
            self.measured_issued += 1
        number = self.issued
        self.issued += 1
        return number, warmup

    # -- running ----------------------------------------------------------
    async def run(self) -> LevelSummary:
        level = self.level
        self.emit(
            LevelStarted(
                self.index,
                level.in_flight_cap,
                level.offered_rps,
                self.spec.requests_for(level),
                self.spec.duration_s,
            )
        )
        ticker = asyncio.create_task(self._tick())
        try:
            if isinstance(level, ClosedLoop):
                await self._closed(level)
            else:
                await self._open(level)
        except BaseException:
            # Cancelled from outside (Ctrl-C, the TUI stopping a run) or a sink
            # error: stop every request, each one still records itself as cut.
            for task in self.tasks:
                task.cancel()
            await asyncio.gather(*self.tasks, return_exceptions=True)
            raise
        finally:
            ticker.cancel()
        self._progress()
        return self.tally.summary()

    async def _closed(self, level: ClosedLoop) -> None:
        async def worker() -> None:
            while (slot := self._claim(time.perf_counter())) is not None:
                await self._one(*slot, scheduled=time.perf_counter())

        self.tasks = {asyncio.create_task(worker()) for _ in range(level.concurrency)}
        await self._finish(self.tasks)

    async def _open(self, level: OpenLoop) -> None:
        gate = asyncio.Semaphore(level.max_concurrency) if level.max_concurrency else None
        gaps = level.gaps_s(self.spec.seed * 7919 + self.index)
        tasks = self.tasks
        due = self.start
        while (slot := self._claim(due)) is not None:
            delay = due - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.add(asyncio.create_task(self._gated(gate, *slot, scheduled=due)))
            if len(tasks) >= 1024:  # drop finished ones now and then, keeping their errors
                done = {t for t in tasks if t.done()}
                await _reap(done)
                tasks -= done
            due += next(gaps)
        await self._finish(tasks)

    async def _gated(
        self, gate: asyncio.Semaphore | None, number: int, warmup: bool, scheduled: float
    ) -> None:
        if gate is None:
            await self._one(number, warmup, scheduled=scheduled)
            return
        async with gate:  # waiting here shows up as schedule lag, not hidden
            await self._one(number, warmup, scheduled=scheduled)

    async def _finish(self, tasks: set[asyncio.Task[None]]) -> None:
        """Wait for in-flight requests; after a duration stop give them ``drain_s``."""
        if not tasks:
            return
        pending = tasks
        while pending:
            deadline = self._deadline()
            if deadline is None:
                _done, pending = await asyncio.wait(pending, timeout=1.0)
                continue
            limit = deadline + self.spec.drain_s - time.perf_counter()
            _done, pending = await asyncio.wait(pending, timeout=max(limit, 0.0))
            break
        for task in pending:
            task.cancel()  # cut: recorded as incomplete by _one
        await _reap(tasks)

    async def _one(self, number: int, warmup: bool, scheduled: float) -> None:
        item = self.prompts.item(self.first_number + number)
        body = openai_stream.build_body(
            model=self.target.model,
            prompt=item.prompt,
            max_tokens=item.output_len,
            chat=self.target.chat,
            include_usage=self.quirks.usage_in_stream,
            extra=self.quirks.exact_length_fields(item.output_len),
        )
        state = openai_stream.StreamState()
        cut = True
        self.in_flight += 1
        try:
            await self.client.stream(
                self.url, body, state, request_id=f"{self.run_id}-{self.index}-{number}"
            )
            cut = False
        finally:
            self.in_flight -= 1
            self._keep(self._record(number, warmup, scheduled, state, cut, item))

    def _record(
        self,
        number: int,
        warmup: bool,
        scheduled: float,
        state: openai_stream.StreamState,
        cut: bool,
        item: PromptItem,
    ) -> RequestRecord:
        epoch = self.clock.epoch
        chunks = state.chunk_perf
        counted = len(chunks)
        usage_out = state.usage_completion_tokens
        return RequestRecord(
            run_id=self.run_id,
            level_index=self.index,
            request_index=number,
            scheduled_at=epoch(scheduled),
            sent_at=epoch(state.sent_perf if state.sent_perf is not None else scheduled),
            first_token_at=epoch(chunks[0]) if chunks else None,
            end_at=epoch(chunks[-1]) if chunks else None,
            prompt_tokens=state.usage_prompt_tokens,
            output_tokens=usage_out if usage_out is not None else counted,
            usage_completion_tokens=usage_out,
            counted_output_tokens=counted,
            chunk_count=counted,
            itl_s=tuple(b - a for a, b in pairwise(chunks)),
            error_kind=None if cut else state.error_kind,
            http_status=state.http_status,
            error_message="cut at the level's end" if cut else state.error_message,
            incomplete=cut,
            warmup=warmup,
            server_decode_tok_s=state.server_decode_tok_s,
            requested_prompt_tokens=item.engine_input_len,
            requested_output_tokens=item.output_len,
        )

    def _keep(self, record: RequestRecord) -> None:
        self.finished += 1
        self.tally.add(record)
        self.emit(record)  # first: a sink that fails (a full disk) keeps it from no one else
        self.sink.write(record)
        if record.warmup:
            return
        if record.incomplete:
            self.cut += 1
            return
        if record.error_kind is not None:
            self.errors[str(record.error_kind)] += 1
            return
        if record.ttft_s is not None:
            self.ttfts.add((record.ttft_s,))
        self.itls.add(record.itl_s)
        self.token_marks.append((time.perf_counter(), record.output_tokens))

    # -- live progress ------------------------------------------------------
    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(PROGRESS_INTERVAL_S)
            self._progress()

    def _progress(self) -> None:
        now = time.perf_counter()
        marks = self.token_marks
        while marks and marks[0][0] < now - LIVE_RATE_WINDOW_S:
            marks.popleft()
        span = min(LIVE_RATE_WINDOW_S, now - self.start)
        ordered = sorted(self.ttfts.values)
        gaps = sorted(self.itls.values)
        self.emit(
            LevelProgress(
                level_index=self.index,
                completed=self.tally.completed,
                failed=sum(self.errors.values()),
                incomplete=self.cut,
                in_flight=self.in_flight,
                output_tok_s=sum(n for _, n in marks) / span if span > 0 else 0.0,
                ttft_p50_s=quantile(ordered, 0.5) if ordered else None,
                ttft_p99_s=quantile(ordered, 0.99) if ordered else None,
                errors_by_kind=dict(self.errors),
                elapsed_s=now - self.start,
                itl_p50_s=quantile(gaps, 0.5) if gaps else None,
                itl_p99_s=quantile(gaps, 0.99) if gaps else None,
            )
        )


async def _reap(tasks: set[asyncio.Task[None]]) -> None:
    """Wait for ``tasks``; re-raise a real error (a sink that cannot write, say)."""
    for outcome in await asyncio.gather(*tasks, return_exceptions=True):
        if isinstance(outcome, BaseException) and not isinstance(outcome, asyncio.CancelledError):
            raise outcome
