"""``infer-top bench``: a headless load test with a live bar and a summary table.

It composes the load generator (``loadgen``) with the store's one recorder
(``store.recorder``) when ``--save`` is given: the run is stored exactly as the
TUI stores it (docs/design.md, "The run path")."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys

import aiohttp
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
)

from agents.client import AgentError
from control.bench_args import API_KEY_ENV, add_arguments
from control.bench_output import (
    LiveBar,
    close_outputs,
    open_outputs,
    print_summary,
    too_many_failures,
)
from control.bench_telemetry import with_node_telemetry
from control.bench_workers import bench_workers
from control.config import ConfigError, NodeConfig
from control.distributed import bench_distributed, check_reach, split_spec
from control.noderuns import NodeRunEnded, bench_on_node
from control.preflight import GENERIC_KIND, PreflightError, preflight
from control.reach import Placement, agent_target, find_node
from control.replicas import bench_replicas, replica_nodes
from control.ssh_tunnel import TunnelError
from control.transport import held
from loadgen.process import TermAsInterrupt, new_run_id, run_in_new_loop
from loadgen.profiles import (
    Arrival,
    Level,
    LoadSpec,
    OpenLoop,
    ProfileError,
    concurrency_sweep,
    parse_slo,
)
from loadgen.report import write_csv, write_json
from loadgen.runner import Target, run_load
from loadgen.setup import describe_run, plain
from loadgen.workload import PromptSource, Workload, WorkloadError
from runs.events import (
    LevelFinished,
    RunEvent,
    RunFailed,
    RunInterrupted,
)
from runs.records import RequestRecord
from runs.units import parse_duration_s
from store import RunRecorder

DEFAULT_REQUESTS = 64


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "bench",
        help="load-test an OpenAI-compatible endpoint (concurrency sweep or arrival rate)",
        description="Stream requests at an OpenAI-compatible engine and report TTFT, TPOT, "
        "ITL, E2E, throughput, goodput and failures per level (vLLM metric definitions).",
    )
    add_arguments(p)
    p.set_defaults(func=run)


def build(args: argparse.Namespace) -> tuple[LoadSpec, Workload, Target]:
    """Arguments -> spec, workload and target; ProfileError / WorkloadError on nonsense."""
    levels: tuple[Level, ...]
    if args.rate:
        levels = tuple(
            OpenLoop(r, Arrival(args.arrival), args.burstiness, args.max_concurrency)
            for r in args.rate
        )
    else:
        levels = concurrency_sweep(args.concurrency or [1])
    warm = args.warmup.strip()
    warm_count, warm_s = (int(warm), 0.0) if warm.isdigit() else (0, parse_duration_s(warm))
    requests = args.requests
    if requests is None and args.duration is None:
        requests = DEFAULT_REQUESTS
    spec = LoadSpec(
        levels,
        requests_per_level=requests,
        min_requests_per_client=args.min_requests_per_client,
        duration_s=args.duration,
        warmup_requests=warm_count,
        warmup_s=warm_s,
        request_timeout_s=args.timeout,
        stall_timeout_s=args.stall_timeout,
        slo=parse_slo(args.slo) if args.slo else None,
        seed=args.seed or 0,
    )
    workload = Workload(
        input_len=args.input_len,
        output_len=args.output_len,
        range_ratio=args.range_ratio,
        shared_prefix_len=args.shared_prefix_len,
        dataset=args.dataset,
        on_bad_line=args.on_bad_line,
        seed=args.seed,
    )
    key = args.api_key or os.environ.get(API_KEY_ENV) or None
    kind = args.engine or GENERIC_KIND
    target = Target(args.url or "", args.model or "", kind, key, chat=not args.completions)
    return spec, workload, target


def run(args: argparse.Namespace) -> int:
    err = Console(stderr=True)
    try:
        spec, workload, target = build(args)
        if args.load_nodes:
            split_spec(spec, len(args.load_nodes))  # each node's share is a valid profile
    except (ProfileError, WorkloadError, ValueError) as exc:
        err.print(f"[red]error:[/] {exc}")
        return 2
    placement = Placement()
    if (args.url is None) == (args.node is None) or (args.node is None) != (args.engine_id is None):
        err.print("[red]error:[/] name the engine by --url, or by --node and --engine-id")
        return 2
    if (args.via_proxy or args.load_nodes) and args.node is None:
        err.print("[red]error:[/] --via-proxy and --load-nodes go with --node and --engine-id")
        return 2
    if args.workers > 1 and args.node is not None and not args.via_proxy:
        err.print(
            "[red]error:[/] --workers spreads a run generated here: it goes with --url or "
            "--via-proxy (a run on the node, or over --load-nodes, is the node's agent's)"
        )
        return 2
    if args.via_proxy and args.load_nodes:
        err.print("[red]error:[/] --load-nodes generates the load on those nodes: no --via-proxy")
        return 2
    if args.all_replicas and (args.node is None or args.via_proxy or args.load_nodes):
        err.print(
            "[red]error:[/] --all-replicas goes with --node (the Swarm manager that deployed "
            "the service) and --engine-id (the service), without --via-proxy or --load-nodes"
        )
        return 2
    if args.node is None:
        return _run(args, spec, workload, target, placement, None, err)
    replicas: tuple[str, ...] = ()
    try:
        node = find_node(args.config, args.node)
        if args.all_replicas:
            replicas = run_in_new_loop(replica_nodes(node, args.engine_id))
            split_spec(spec, len(replicas))  # each replica's share is a valid profile
            node = find_node(args.config, replicas[0])  # checked through a replica's agent
        if args.load_nodes:
            # refused before anything runs
            check_reach(node, [find_node(args.config, name) for name in args.load_nodes])
        # the node's link (an ssh tunnel) stays up for the whole run: the load goes over it
        with held(node) as link:
            target, placement = run_in_new_loop(agent_target(node, link, args.engine_id, target))
            # a run over replicas stores no one node's GPU telemetry as its engine's
            engine_node = None if replicas else node
            return _run(args, spec, workload, target, placement, engine_node, err, replicas)
    except (ConfigError, TunnelError, AgentError, OSError, aiohttp.ClientError) as exc:
        err.print(f"[red]error:[/] {exc}")
        return 2
    except ProfileError as exc:
        err.print(f"[red]error:[/] --all-replicas over {len(replicas)} replicas: {exc}")
        return 2


def _run(
    args: argparse.Namespace,
    spec: LoadSpec,
    workload: Workload,
    target: Target,
    placement: Placement,
    node: NodeConfig | None,
    err: Console,
    replicas: tuple[str, ...] = (),
) -> int:
    """The run itself, its engine found (``run``); ``node`` is the engine's node, whose
    GPU telemetry over the run is stored with it (``control.bench_telemetry``);
    ``replicas``: the nodes running a Swarm service's replicas, one share each
    (``--all-replicas``, ``control.replicas``)."""
    try:
        PromptSource(workload)  # an unreadable dataset is bad input, found before any request
    except WorkloadError as exc:
        err.print(f"[red]error:[/] {exc}")
        return 2
    try:
        if args.workers > 1:
            split_spec(spec, args.workers)  # each worker's share is a valid profile
    except ProfileError as exc:
        err.print(f"[red]error:[/] --workers {args.workers}: {exc}")
        return 2
    try:
        checked = run_in_new_loop(
            preflight(
                target.url,
                model=target.model or None,
                engine_kind=target.engine_kind,
                api_key=target.api_key,
                workload=workload,
            )
        )
    except PreflightError as exc:  # before any request: nothing is stored
        err.print(f"[red]error:[/] {exc}", highlight=False, soft_wrap=True)
        return 2
    if checked.simulated:
        err.print(
            "[yellow]note:[/] this engine is infer-top's simulator: its figures are simulated"
        )
    target = dataclasses.replace(target, model=checked.model)
    if args.engine is None and len(checked.detected_kinds) == 1:
        target = dataclasses.replace(target, engine_kind=checked.detected_kinds[0])
    setup = describe_run(
        spec,
        workload,
        target,
        origin="bench",
        name=args.name,
        simulated=checked.simulated,
        node=placement.node,
        deployment_id=placement.deployment_id,
        gpu_ids=placement.gpu_ids,
        path=placement.path,
        engine=placement.engine,
    )
    try:
        sink, store = open_outputs(args)
    except Exception as exc:  # unwritable JSONL path, store that will not open
        err.print(f"[red]error:[/] cannot open the output: {exc}")
        return 2
    recorder = RunRecorder(store) if store is not None else None
    progress = None
    if not args.quiet:
        progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.fields[info]}"),
            console=err,
            transient=False,
        )
    live = LiveBar(progress, spec, err)

    def emit(event: RunEvent) -> None:
        live(event)
        if recorder is not None:
            recorder.on_event(event)

    def emit_node(event: RunEvent) -> None:  # a node-side run's records reach the sinks here
        if isinstance(event, RequestRecord):
            sink.write(event)
        elif isinstance(event, LevelFinished):
            sink.level(event.summary)
        emit(event)

    term = TermAsInterrupt()
    try:
        if progress is not None:
            progress.start()
        with term:
            if replicas:
                running = bench_replicas(
                    args.config, replicas, args.engine_id, spec, workload, emit_node,
                    model=target.model, chat=target.chat, name=args.name,
                )  # fmt: skip
            elif args.load_nodes:
                running = bench_distributed(
                    args.config, args.node, args.engine_id, args.load_nodes, spec, workload,
                    emit_node, model=target.model, chat=target.chat, name=args.name,
                )  # fmt: skip
            elif args.node is not None and not args.via_proxy:
                running = bench_on_node(
                    args.config, args.node, args.engine_id, spec, workload, emit_node,
                    model=target.model, chat=target.chat, name=args.name,
                )  # fmt: skip
            elif args.workers > 1:
                running = bench_workers(
                    spec, workload, target, args.workers, emit_node, setup=setup
                )
            else:
                running = run_load(
                    spec, workload, target, sink, emit, run_id=new_run_id(), setup=setup
                )
            if node is not None and store is not None:
                result, window = run_in_new_loop(with_node_telemetry(node, store, running))
                if window.note():
                    err.print(f"[yellow]note:[/] {window.note()}", highlight=False)
            else:
                result = run_in_new_loop(running)
    except KeyboardInterrupt:  # Ctrl-C, or SIGTERM (timeout, systemd, CI)
        by = "SIGTERM" if term.received else "Ctrl-C"
        emit(RunInterrupted(f"stopped by {by}"))
        err.print(f"[yellow]interrupted by {by}[/]: finished and cut requests are in the sinks")
        return 143 if term.received else 130
    except NodeRunEnded as exc:  # already recorded as the node said
        err.print(f"[red]error:[/] {exc}", highlight=False, soft_wrap=True)
        return 1
    except AgentError as exc:  # the node refused the run (unknown engine, bad spec)
        emit(RunFailed(str(exc)))
        err.print(f"[red]error:[/] {exc}")
        return 1
    except (WorkloadError, OSError) as exc:  # e.g. the JSONL disk filled up mid-run
        emit(RunFailed(str(exc)))
        err.print(f"[red]error:[/] {exc}")
        return 1
    except BaseException as exc:
        emit(RunFailed(f"{type(exc).__name__}: {exc}"))
        raise
    finally:
        if progress is not None:
            progress.stop()
        closed = close_outputs(sink, store, err)
    workload_data = live.setup.workload if live.setup is not None else plain(workload)
    print_summary(result, workload_data)
    context = {
        "target": {"url": target.url, "model": target.model, "engine": target.engine_kind},
        "spec": plain(spec),
        "workload": dict(workload_data),
    }
    if args.json_path:
        write_json(args.json_path, result, context)
    if args.csv_path:
        write_csv(args.csv_path, result.levels)
    if store is not None and store.unsaved:  # said above why (a full disk...)
        err.print(
            f"[red]error:[/] run {result.run_id} is only partly in the store: {store.unsaved} "
            "rows could not be written; what was written is kept, and the run is listed "
            "as interrupted",
            highlight=False,
            soft_wrap=True,
        )
    elif recorder is not None:
        why = f": {recorder.reason}" if recorder.reason else ""
        err.print(
            f"saved to the store as run {result.run_id} ({recorder.status}{why})",
            highlight=False,
            soft_wrap=True,
        )
    too_many = too_many_failures(result, args.max_failure_pct)
    if too_many:
        err.print(f"[red]error:[/] {too_many}", highlight=False, soft_wrap=True)
    ok = sum(s.completed for s in result.levels)
    return 0 if ok and closed and not too_many else 1


if __name__ == "__main__":  # pragma: no cover
    parser = argparse.ArgumentParser(prog="infer-top")
    register(parser.add_subparsers())
    ns = parser.parse_args(["bench", *sys.argv[1:]])
    sys.exit(ns.func(ns))
