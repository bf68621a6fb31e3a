"""``infer-agent``: the node agent's command line."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from agents import __version__


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="infer-agent",
        description="infer-top node agent: streams GPU, host and engine telemetry and starts, "
        "stops and swaps allow-listed inference engines through Docker Compose. "
        "Every route but /healthz needs the bearer token; binds 127.0.0.1 unless --listen "
        "says otherwise.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"infer-agent {__version__}")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    build_parser().parse_args(argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
