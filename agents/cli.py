"""``infer-agent``: the node agent's command line."""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import logging
import re
import ssl
import sys
from collections.abc import Sequence
from pathlib import Path

from agents import __version__
from agents.config import AgentConfig, ConfigError, bundled_trace, default_state_dir, read_token
from runs.units import duration_arg

EPILOG = """\
security:
  Every route except GET /healthz needs "Authorization: Bearer <token>"; the token is read
  from --token-file (first line) or $INFER_AGENT_TOKEN and compared in constant time.
  The agent binds 127.0.0.1 unless --listen says otherwise; use --tls-cert/--tls-key when
  it listens on a network. Start requests may only name allow-listed engines and images,
  never privileged mode, host PID/IPC beyond the engine's Compose file, or bind mounts
  outside --model-dir. Every control action is appended to <state-dir>/audit.log.

examples:
  infer-agent --token-file /etc/infer-agent/token --allow-image vllm/vllm-openai:v0.11.0 \\
      --model-dir /srv/models
  infer-agent --token-file tok --replay-trace            # replayed H200, no GPU needed
  infer-agent --listen 0.0.0.0:7443 --tls-cert c.pem --tls-key k.pem --token-file tok
"""


def parse_listen(value: str) -> tuple[str, int]:
    match = re.fullmatch(r"\[?([^\]]*?)\]?:(\d+)", value)
    if not match:
        raise argparse.ArgumentTypeError(f"--listen wants HOST:PORT, got {value!r}")
    return match.group(1) or "127.0.0.1", int(match.group(2))


def parse_native(value: str) -> tuple[str, Path]:
    kind, sep, path = value.partition("=")
    if not sep or not path:
        raise argparse.ArgumentTypeError(f"--native wants KIND=PATH, got {value!r}")
    return kind, Path(path)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="infer-agent",
        description="infer-top node agent: streams GPU, host and engine telemetry and starts, "
        "stops and swaps allow-listed inference engines through Docker Compose (or as native "
        "processes). Run one per node; the infer-top TUI connects to it.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"infer-agent {__version__}")
    parser.add_argument(
        "--listen",
        type=parse_listen,
        default=("127.0.0.1", 7070),
        metavar="HOST:PORT",
        help="address to serve on (default 127.0.0.1:7070)",
    )
    parser.add_argument(
        "--token-file",
        type=Path,
        help="file whose first line is the bearer token (else $INFER_AGENT_TOKEN)",
    )
    parser.add_argument("--tls-cert", type=Path, help="PEM certificate: serve HTTPS/WSS")
    parser.add_argument("--tls-key", type=Path, help="PEM private key for --tls-cert")
    parser.add_argument(
        "--allow-image",
        action="append",
        default=[],
        metavar="IMAGE",
        help="an image start requests may name (repeatable); without any, "
        "only the catalog's default images run",
    )
    parser.add_argument(
        "--allow-engine",
        action="append",
        default=[],
        metavar="KIND",
        help="restrict engines to these kinds (repeatable; default: all known)",
    )
    parser.add_argument(
        "--model-dir",
        action="append",
        default=[],
        type=Path,
        metavar="DIR",
        help="host directory engines may mount (repeatable)",
    )
    parser.add_argument(
        "--cache-dir",
        action="append",
        default=[],
        type=Path,
        metavar="DIR",
        help="host model cache the inventory lists, not mountable by engines: a Hugging "
        "Face cache, a native Ollama's store (repeatable)",
    )
    parser.add_argument(
        "--native",
        action="append",
        default=[],
        type=parse_native,
        metavar="KIND=PATH",
        help="a natively installed engine, e.g. llamacpp=/usr/bin/llama-server",
    )
    parser.add_argument(
        "--replay-trace",
        nargs="?",
        const=bundled_trace(),
        type=Path,
        metavar="PATH",
        help="replay an NVML recording as the GPUs (default: "
        "the bundled H200 trace) instead of reading real devices",
    )
    parser.add_argument(
        "--replay-gpus", type=int, default=1, help="how many GPUs the replay shows (default 1)"
    )
    parser.add_argument(
        "--replay-processes",
        type=Path,
        metavar="PATH",
        help="the replayed GPUs' process lists, NVML's nvmlProcessInfo_v3_t fields as JSON "
        "(default: the bundled list, agents/data/h200-processes.json, which says its format)",
    )
    parser.add_argument(
        "--platform",
        choices=["nvidia", "jetson", "linux", "replay"],
        help="override platform detection",
    )
    parser.add_argument("--node-name", help="name shown in the fleet (default: host name)")
    parser.add_argument(
        "--interval",
        type=duration_arg,
        default=1.0,
        metavar="DURATION",
        help="sampling interval, e.g. 1s or 500ms (default 1s)",
    )
    parser.add_argument(
        "--health-interval",
        type=duration_arg,
        default=5.0,
        metavar="DURATION",
        help="how often running engines' health routes are asked again: a hung engine "
        "shows unhealthy within about this plus 2 s (default 5s)",
    )
    parser.add_argument(
        "--state-dir",
        type=Path,
        default=None,
        help=f"deployment records and audit log (default {default_state_dir()})",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    return parser


def config_from_args(args: argparse.Namespace) -> AgentConfig:
    host, port = args.listen
    values: dict[str, object] = {
        "token": read_token(args.token_file),
        "host": host,
        "port": port,
        "tls_cert": args.tls_cert,
        "tls_key": args.tls_key,
        "allowed_images": frozenset(args.allow_image),
        "model_dirs": tuple(args.model_dir),
        "cache_dirs": tuple(args.cache_dir),
        "interval_s": args.interval,
        "health_interval_s": args.health_interval,
        "native_binaries": dict(args.native),
        "replay_gpus": args.replay_gpus,
        "replay_processes": args.replay_processes,
    }
    if args.allow_engine:
        values["allowed_engines"] = frozenset(args.allow_engine)
    if args.replay_trace is not None:
        values["platform"], values["replay_trace"] = "replay", args.replay_trace
    elif args.platform:
        values["platform"] = args.platform
    if args.node_name:
        values["node_name"] = args.node_name
    if args.state_dir:
        values["state_dir"] = args.state_dir
    return AgentConfig(**values)  # type: ignore[arg-type]


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        config = config_from_args(args)
    except ConfigError as exc:
        print(f"infer-agent: {exc}", file=sys.stderr)
        return 2
    from aiohttp import web

    from agents.proxy import AgentAccessLogger
    from agents.server import create_app

    ssl_context = None
    if config.tls_cert and config.tls_key:
        ssl_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        try:
            ssl_context.load_cert_chain(config.tls_cert, config.tls_key)
        except (OSError, ssl.SSLError) as exc:
            print(f"infer-agent: cannot load TLS certificate/key: {exc}", file=sys.stderr)
            return 2
        pin = certificate_fingerprint(config.tls_cert.read_text())
        # the operator pins this in the control plane's config (or checks it against a CA's)
        print(
            f'infer-agent: TLS certificate {pin} (pin it: fingerprint = "{pin}")',
            file=sys.stderr,
            flush=True,
        )
    if config.host not in ("127.0.0.1", "::1", "localhost") and ssl_context is None:
        logging.warning(
            "listening on %s without TLS: the token crosses the network in clear", config.host
        )
    web.run_app(
        create_app(config),
        host=config.host,
        port=config.port,
        ssl_context=ssl_context,
        print=lambda msg: logging.info("%s", msg),
        access_log_class=AgentAccessLogger,
        loop=_event_loop(),
    )
    return 0


def certificate_fingerprint(pem: str) -> str:
    """``sha256:`` and the hex SHA-256 of the first certificate in ``pem`` (its DER bytes:
    what a TLS client sees, and what ``openssl x509 -fingerprint -sha256`` hashes)."""
    first = pem[pem.index(ssl.PEM_HEADER) : pem.index(ssl.PEM_FOOTER) + len(ssl.PEM_FOOTER)]
    return "sha256:" + hashlib.sha256(ssl.PEM_cert_to_DER_cert(first)).hexdigest()


def _event_loop() -> asyncio.AbstractEventLoop:
    """uvloop (a dependency; asyncio where it could not be installed): the proxy passes
    every streamed chunk through the loop, and uvloop's socket path costs a fraction of
    asyncio's."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
    return loop


if __name__ == "__main__":
    sys.exit(main())
