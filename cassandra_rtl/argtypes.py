"""argparse ``type=`` helpers: every numeric option is range-checked while the command line is parsed,
before any slow work (loading a model, encoding, building a draft, starting a simulator)."""
from __future__ import annotations

import argparse
import math


def int_at_least(minimum: int, what: str = "an integer"):
    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what} >= {minimum}, got {text!r}") from None
        if v < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {v}")
        return v
    parse.__name__ = f"int>={minimum}"
    return parse


def int_range(lo: int, hi: int):
    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer in {lo}..{hi}, got {text!r}") from None
        if not lo <= v <= hi:
            raise argparse.ArgumentTypeError(f"must be in {lo}..{hi}, got {v}")
        return v
    parse.__name__ = f"int {lo}..{hi}"
    return parse


def float_range(lo: float, hi: float, lo_open: bool = False):
    def parse(text: str) -> float:
        try:
            v = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if not math.isfinite(v) or v < lo or v > hi or lo_open and v == lo:
            raise argparse.ArgumentTypeError(f"must be in {'(' if lo_open else '['}{lo:g}, {hi:g}], got {text}")
        return v
    parse.__name__ = "number"
    return parse


positive_int = int_at_least(1)
non_negative_int = int_at_least(0)


def layer_list(text: str) -> list[int] | None:
    """'all' -> None, else comma-separated non-negative layer indices (checked against the model later)."""
    if text.strip() == "all":
        return None
    try:
        out = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected 'all' or comma-separated layer indices, got {text!r}") from None
    if not out or any(i < 0 for i in out):
        raise argparse.ArgumentTypeError(f"expected 'all' or comma-separated layer indices >= 0, got {text!r}")
    return out
