"""Argument types of ``infer-top bench``: lists and percentages in words when wrong."""

from __future__ import annotations

import argparse


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
