"""Argument checks used at every public boundary.  Messages name the parameter, never data values."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.typing import NDArray

from dpopt.exceptions import InvalidParameterError

__all__ = ["check_array", "check_int", "check_nonneg", "check_positive", "check_probability"]


def _as_float(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise InvalidParameterError(f"{name}: expected a real number, got {type(value).__name__}")
    x = float(value)
    if math.isnan(x):
        raise InvalidParameterError(f"{name}: must be a number, got NaN")
    return x


def check_positive(value: Any, name: str, *, allow_inf: bool = False) -> float:
    """Return ``value`` as a float after checking it is > 0 (and finite unless ``allow_inf``)."""
    x = _as_float(value, name)
    if not (x > 0):
        raise InvalidParameterError(f"{name}: must be > 0")
    if math.isinf(x) and not allow_inf:
        raise InvalidParameterError(f"{name}: must be finite")
    return x


def check_nonneg(value: Any, name: str) -> float:
    """Return ``value`` as a finite float after checking it is >= 0."""
    x = _as_float(value, name)
    if not (x >= 0) or math.isinf(x):
        raise InvalidParameterError(f"{name}: must be a finite number >= 0")
    return x


def check_probability(value: Any, name: str, *, open_right: bool = True, open_left: bool = False) -> float:
    """Return ``value`` after checking it lies in [0, 1) (or the interval the flags select)."""
    x = _as_float(value, name)
    lo_ok = x > 0 if open_left else x >= 0
    hi_ok = x < 1 if open_right else x <= 1
    if not (lo_ok and hi_ok):
        lo = "(0" if open_left else "[0"
        hi = "1)" if open_right else "1]"
        raise InvalidParameterError(f"{name}: must lie in {lo}, {hi}")
    return x


def check_int(value: Any, name: str, *, minimum: int = 1) -> int:
    """Return ``value`` as an int after checking it is an integer >= ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise InvalidParameterError(f"{name}: expected an integer, got {type(value).__name__}")
    if int(value) < minimum:
        raise InvalidParameterError(f"{name}: must be an integer >= {minimum}")
    return int(value)


def check_array(
    value: Any, name: str, *, ndim: int | None = None, finite: bool = True, dtype: type = float
) -> NDArray[Any]:
    """Convert to a numpy array and check dimension and finiteness (message without values)."""
    try:
        arr: NDArray[Any] = np.asarray(value, dtype=dtype)
    except (TypeError, ValueError):
        raise InvalidParameterError(f"{name}: could not be converted to a numeric array") from None
    if ndim is not None and arr.ndim != ndim:
        raise InvalidParameterError(f"{name}: expected a {ndim}-d array, got shape {arr.shape}")
    if finite and arr.dtype.kind in "fc" and not np.all(np.isfinite(arr)):
        raise InvalidParameterError(f"{name}: contains NaN or infinite entries; remove or impute them first")
    return arr
