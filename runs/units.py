"""Durations as people type them, on any command line or in any file:
``500ms``, ``30s``, ``2m``, ``1.5h``, ``7d``, ``2w`` or plain seconds."""

from __future__ import annotations

import argparse
import re

_DURATION = re.compile(r"\s*(\d*\.?\d+)\s*(ms|s|m|h|d|w)?\s*")
_UNIT_S = {"ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 7 * 86400.0}


class DurationError(ValueError):
    """Text that is not a duration (the message shows how to write one)."""


def parse_duration_s(text: str) -> float:
    """The duration ``text`` names, in seconds."""
    match = _DURATION.fullmatch(text)
    if not match:
        raise DurationError(f"not a duration: {text!r} (write e.g. 500ms, 30s, 2m, 12h, 7d or 2w)")
    return float(match.group(1)) * _UNIT_S[match.group(2) or "s"]


def duration_arg(text: str) -> float:
    """``parse_duration_s`` as an argparse ``type``: a usage message, not a traceback."""
    try:
        return parse_duration_s(text)
    except DurationError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
