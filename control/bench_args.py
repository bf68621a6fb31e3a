"""The arguments of ``infer-top bench``, and their types: lists and percentages in words
when wrong."""

from __future__ import annotations

import argparse
from pathlib import Path

from loadgen.profiles import Arrival
from loadgen.quirks import known_kinds
from runs.units import duration_arg

API_KEY_ENV = "INFER_TOP_API_KEY"
DEFAULT_MAX_FAILURE_PCT = 10.0


def add_arguments(p: argparse.ArgumentParser) -> None:
    t = p.add_argument_group(
        "target",
        "either --url (the engine's own address) or --node and --engine-id (an engine an "
        "agent runs: the load is generated on that node, next to the engine, and streamed "
        "back; with --via-proxy it is generated here and sent through the agent's proxy)",
    )
    t.add_argument("--url", help="engine base URL, e.g. http://127.0.0.1:8080")
    t.add_argument("--node", help="a node named in the config file (see --config)")
    t.add_argument("--engine-id", help="the deployment id of an engine on --node")
    t.add_argument("--config", type=Path, default=None, help="config file naming the nodes")
    t.add_argument(
        "--via-proxy",
        action="store_true",
        help="with --node: generate the load here, through the agent's proxy (path proxied)",
    )
    t.add_argument(
        "--load-nodes",
        type=names,
        default=None,
        help="with --node: split the run over these nodes' agents, e.g. a,b (one run, "
        "concurrency or rate divided between them, started together on clocks measured "
        "here; --node's own agent loads it over loopback, the others through its proxy)",
    )
    t.add_argument(
        "--all-replicas",
        action="store_true",
        help="with --node and --engine-id naming a Swarm service and the manager node whose "
        "agent deployed it: one run over every replica, each replica's node loading its own "
        "replica over loopback (concurrency or rate divided between them, started together, "
        "one stored run whose records name the node and replica of each request)",
    )
    t.add_argument("--model", help="model name the engine serves (default: the engine's)")
    t.add_argument(
        "--engine",
        default=None,
        choices=known_kinds(),
        help="engine kind (default: detected from its /metrics, else openai)",
    )
    t.add_argument("--api-key", default=None, help=f"bearer key (better: ${API_KEY_ENV})")
    t.add_argument("--completions", action="store_true", help="use /v1/completions, not chat")
    lp = p.add_argument_group("load profile")
    mode = lp.add_mutually_exclusive_group()
    mode.add_argument("--concurrency", type=int_list, help="closed-loop levels, e.g. 1,2,4,8")
    mode.add_argument("--rate", type=float_list, help="open-loop request rates (req/s)")
    lp.add_argument("--arrival", choices=[a.value for a in Arrival], default="poisson")
    lp.add_argument("--burstiness", type=float, default=1.0, help="gamma shape (1 = Poisson)")
    lp.add_argument("--max-concurrency", type=int, default=None, help="cap for --rate levels")
    lp.add_argument("--requests", type=int, default=None, help="measured requests per level")
    lp.add_argument(
        "--min-requests-per-client",
        type=int,
        default=0,
        help="with --concurrency: each level sends at least this many per client",
    )
    lp.add_argument("--duration", type=duration_arg, default=None, help="per level, e.g. 30s")
    lp.add_argument("--warmup", default="0", help="warm-up per level: a count (8) or time (5s)")
    lp.add_argument("--timeout", type=duration_arg, default=600.0, help="per-request limit")
    lp.add_argument(
        "--stall-timeout", type=duration_arg, default=60.0, help="max gap between bytes"
    )
    lp.add_argument("--slo", type=str, default=None, help="e.g. ttft=500ms,tpot=50ms")
    lp.add_argument(
        "--workers",
        type=positive,
        default=1,
        help="spread the run over this many load-generator processes here (one per core; "
        "one run, percentiles from every worker's requests)",
    )
    w = p.add_argument_group("workload")
    w.add_argument("--input-len", type=int, default=512, help="prompt tokens")
    w.add_argument("--output-len", type=int, default=128, help="output tokens")
    w.add_argument("--range-ratio", type=float, default=0.0, help="lengths in [L(1-r), L(1+r)]")
    w.add_argument("--shared-prefix-len", type=int, default=0, help="tokens shared by all")
    w.add_argument(
        "--dataset",
        default=None,
        help="prompts from a file, read streaming: a ShareGPT JSON list, or JSONL (ShareGPT "
        'conversations, or {"prompt": ..., "output_len": N, "input_len": N} with optional '
        "lengths); stored by name and SHA-256",
    )
    w.add_argument(
        "--on-bad-line",
        choices=["fail", "skip"],
        default="fail",
        help="a malformed dataset line (reported with its number) fails the run before it "
        "starts (default), or is skipped and named in the warnings",
    )
    w.add_argument(
        "--seed",
        type=int,
        default=None,
        help="send the same prompts as another run with this seed (default: fresh prompts "
        "every run, so no run is served from an earlier run's prefix cache)",
    )
    o = p.add_argument_group("output")
    o.add_argument("--json", dest="json_path", help="write the run summary as JSON")
    o.add_argument("--csv", dest="csv_path", help="write one CSV row per level")
    o.add_argument("--jsonl", dest="jsonl_path", help="stream every request record to JSONL")
    o.add_argument("--save", action="store_true", help="save the run to the infer-top store")
    o.add_argument("--db", default=None, help="store path (default $INFER_TOP_DB / XDG data)")
    o.add_argument("--name", default=None, help="run name in the store")
    o.add_argument("--quiet", action="store_true", help="no live progress bar")
    o.add_argument(
        "--max-failure-pct",
        type=percent,
        default=DEFAULT_MAX_FAILURE_PCT,
        help="exit 1 when more than this percentage of the measured requests failed "
        f"(default {DEFAULT_MAX_FAILURE_PCT:g}); the message counts the failures by kind",
    )


def int_list(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected integers like 1,2,4,8, got {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError("concurrency levels must be integers >= 1")
    return values


def positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return value


def names(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names or len(set(names)) != len(names):
        raise argparse.ArgumentTypeError(f"expected node names like a,b, each once, got {text!r}")
    return names


def float_list(text: str) -> list[float]:
    try:
        return [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected rates like 2,5,10, got {text!r}") from None


def percent(text: str) -> float:
    bad = argparse.ArgumentTypeError(f"expected a percentage from 0 to 100, got {text!r}")
    try:
        value = float(text)
    except ValueError:
        raise bad from None
    if not 0.0 <= value <= 100.0:  # NaN too
        raise bad
    return value
