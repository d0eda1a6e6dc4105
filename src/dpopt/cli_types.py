"""Argument types of the ``dpopt`` command: numeric options are checked when they are parsed.

Each is an ``argparse`` ``type=`` function; a bad value is reported by the parser as one line
``dpopt: error: --timeout: must be > 0, got '-1'`` (exit status 2).
"""

from __future__ import annotations

import argparse
import math
import re

__all__ = [
    "nonneg_float",
    "nonneg_int",
    "positive_float",
    "probability",
]

_INT_RE = re.compile(r"\s*\+?\d+\s*")


def _number(text: str) -> float:
    try:
        x = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(x):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return x


def positive_float(text: str) -> float:
    """A finite number > 0 (``--epsilon``, ``--tol``, ``--timeout``)."""
    x = _number(text)
    if not x > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text!r}")
    return x


def nonneg_float(text: str) -> float:
    """A finite number >= 0 (``--retry-for``)."""
    x = _number(text)
    if not x >= 0:
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text!r}")
    return x


def probability(text: str) -> float:
    """A number in [0, 1) (a total budget's δ, 0 allowed)."""
    x = _number(text)
    if not 0 <= x < 1:
        raise argparse.ArgumentTypeError(f"must lie in [0, 1), got {text!r}")
    return x


def nonneg_int(text: str) -> int:
    """An integer >= 0 (``--seed``, ``--limit``)."""
    if not _INT_RE.fullmatch(text):
        raise argparse.ArgumentTypeError(f"must be an integer >= 0, got {text!r}")
    return int(text)
