"""One run from the events of several load nodes' runs (docs/design.md, "The run path":
distributed runs).

Each load node's agent runs its share of the run and numbers its own events; here they
become the one run the recorder stores. Every finished request is re-tagged with the
merged run's id, a request number unique over the shares (``number * shares + share``)
and the node that sent it, and goes to the recorder at once: the stored count is the
count the nodes sent. A level's summary is computed from every share's raw records once
all shares finished the level (``loadgen.stats.LevelTally``, fed each record as it
comes: exact percentiles of all requests, never an average of per-node percentiles);
its window is put on the engine node's clock with the measured offsets, latencies stay
on the clock of the node that sent each request.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from loadgen.profiles import LoadSpec
from loadgen.stats import LevelTally, StridedSample, quantile
from runs.events import (
    LevelFinished,
    LevelProgress,
    LevelStarted,
    ProgressEvent,
    RunEvent,
    RunEventSink,
    RunFailed,
    RunFinished,
    RunInterrupted,
    RunResult,
    RunStarted,
)
from runs.records import LevelSummary, RequestRecord


class ShareSink:
    """The ``record`` sink of one share's node run: its finished requests, re-tagged,
    to the merged run's recorder and to the merger (its other events reach the merger
    as the share's progress)."""

    def __init__(self, merger: Merger, share: int) -> None:
        self.merger = merger
        self.share = share

    def on_event(self, event: RunEvent, /) -> None:
        if isinstance(event, RequestRecord):
            self.merger.add_record(self.share, event)


@dataclass
class _Level:
    tally: LevelTally
    ttfts: StridedSample = field(default_factory=StridedSample)
    gaps: StridedSample = field(default_factory=StridedSample)
    progress: dict[int, LevelProgress] = field(default_factory=dict)
    started: set[int] = field(default_factory=set)
    finished: set[int] = field(default_factory=set)


class Merger:
    """Turns the shares' progress events into the merged run's; ``record`` (the recorder)
    gets the merged run's every event: its start, each request, each level, its end."""

    def __init__(
        self,
        run_id: str,
        spec: LoadSpec,
        shares: Sequence[LoadSpec],
        nodes: Sequence[str],
        clock_offsets_s: Mapping[str, float],
        record: RunEventSink,
        *,
        kind: str = "load node",
        tag_records: bool = True,
        engine_nodes: Sequence[str] | None = None,
    ) -> None:
        """``kind`` names a share in messages ("load node a"); ``tag_records``: each
        record says which load node sent it (its times are on that node's clock), left
        out where every share ran on this machine (``--workers``); ``engine_nodes``: the
        node whose engine (Swarm replica) each share loads, given to its records, where
        the shares loaded several."""
        self.run_id, self.spec, self.shares, self.nodes = run_id, spec, shares, nodes
        self.kind, self.tag_records, self.engine_nodes = kind, tag_records, engine_nodes
        self.offsets = dict(clock_offsets_s)
        """Each load node's clock minus the run's timeline (the engine node's clock)."""
        self.record = record
        self.levels = [
            _Level(LevelTally(i, level, spec.slo, self.offsets))
            for i, level in enumerate(spec.levels)
        ]
        self.summaries: list[LevelSummary] = []
        self.results: dict[int, RunResult] = {}
        self.warnings: list[str] = []
        self.said: tuple[str, ...] = ()
        """The merged run's own warnings, given as it started."""
        self.ended: ProgressEvent | None = None

    def start(self, started: RunStarted) -> RunStarted:
        self.said = started.warnings
        self.warnings = list(started.warnings)
        self.record.on_event(started)
        return started

    def add_record(self, share: int, record: RequestRecord) -> None:
        merged = replace(
            record,
            run_id=self.run_id,
            request_index=record.request_index * len(self.shares) + share,
            load_node=self.nodes[share] if self.tag_records else None,
            engine_node=None if self.engine_nodes is None else self.engine_nodes[share],
        )
        self.record.on_event(merged)
        level = self.levels[record.level_index]
        level.tally.add(merged)
        if merged.ok and not merged.incomplete and not merged.warmup:
            if merged.ttft_s is not None:
                level.ttfts.add((merged.ttft_s,))
            level.gaps.add(merged.itl_s)

    def on_share_event(self, share: int, event: ProgressEvent) -> list[ProgressEvent]:
        """The merged run's progress events that ``event`` of ``share`` makes; a share
        that failed or was interrupted gives the run's end in words, not yet recorded
        (the caller stops the other shares, then calls ``end``)."""
        match event:
            case RunStarted(warnings=warnings):
                # a share's warning the merged run already gives (prompt sizing) once
                self.warnings += [
                    f"{self.share_name(share)}: {w}" for w in warnings if w not in self.said
                ]
                return []
            case LevelStarted(level_index=index):
                level = self.levels[index]
                level.started.add(share)
                return [self._level_started(index)] if len(level.started) == 1 else []
            case LevelProgress(level_index=index):
                self.levels[index].progress[share] = event
                return [self._progress(index)]
            case LevelFinished(summary=summary):
                level = self.levels[summary.level_index]
                level.finished.add(share)
                if len(level.finished) < len(self.shares):
                    return []
                return [self._level_finished(summary.level_index)]
            case RunFinished(result=result):
                self.results[share] = result
                return [self._finish()] if len(self.results) == len(self.shares) else []
            case RunFailed(message=message):
                return [RunFailed(f"{self.share_name(share)}: {message}")]
            case RunInterrupted(reason=reason):
                return [RunInterrupted(f"{self.share_name(share)}: {reason}")]
        return []

    def share_name(self, share: int) -> str:
        return f"{self.kind} {self.nodes[share]}"

    def end(self, event: RunFailed | RunInterrupted) -> ProgressEvent:
        """End the merged run so; call it once every share stopped (their cut requests
        are in: the recorder takes nothing after the end). An end recorded stays."""
        if self.ended is None:
            self.ended = event
            self.record.on_event(event)
        return self.ended

    def _level_started(self, index: int) -> LevelStarted:
        level = self.spec.levels[index]
        planned = [s.requests_for(s.levels[index]) for s in self.shares]
        return LevelStarted(
            index,
            level.in_flight_cap,
            level.offered_rps,
            None if None in planned else sum(p for p in planned if p is not None),
            self.spec.duration_s,
        )

    def _progress(self, index: int) -> LevelProgress:
        level = self.levels[index]
        ticks = level.progress.values()
        errors: dict[str, int] = {}
        for tick in ticks:
            for kind, n in tick.errors_by_kind.items():
                errors[kind] = errors.get(kind, 0) + n
        ttfts, gaps = sorted(level.ttfts.values), sorted(level.gaps.values)
        return LevelProgress(
            level_index=index,
            completed=sum(t.completed for t in ticks),
            failed=sum(t.failed for t in ticks),
            incomplete=sum(t.incomplete for t in ticks),
            in_flight=sum(t.in_flight for t in ticks),
            output_tok_s=sum(t.output_tok_s for t in ticks),
            ttft_p50_s=quantile(ttfts, 0.5) if ttfts else None,
            ttft_p99_s=quantile(ttfts, 0.99) if ttfts else None,
            errors_by_kind=errors,
            elapsed_s=max(t.elapsed_s for t in ticks),
            itl_p50_s=quantile(gaps, 0.5) if gaps else None,
            itl_p99_s=quantile(gaps, 0.99) if gaps else None,
        )

    def _level_finished(self, index: int) -> LevelFinished:
        summary = self.levels[index].tally.summary()
        self.summaries.append(summary)
        finished = LevelFinished(summary)
        self.record.on_event(finished)
        return finished

    def _finish(self) -> ProgressEvent:
        def on_timeline(share: int, at: float) -> float:
            return at - self.offsets[self.nodes[share]]

        result = RunResult(
            self.run_id,
            min(on_timeline(i, r.started_at) for i, r in self.results.items()),
            max(on_timeline(i, r.ended_at) for i, r in self.results.items()),
            tuple(self.summaries),
            tuple(self.warnings),
            sum(r.records_written for r in self.results.values()),
        )
        if self.ended is None:
            self.ended = RunFinished(result)
            self.record.on_event(self.ended)
        return self.ended
