"""Argument checks used at every public boundary.  Messages name the parameter, never data values."""

from __future__ import annotations

import math
import os
import sys
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from dpopt._lazy import LazyModule
from dpopt.exceptions import InvalidParameterError, LargeDeltaWarning

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray
else:  # imported on first use: the scalar checks below (and ``dpopt ledger show``) need no numpy
    np = LazyModule("numpy")

T = TypeVar("T")

__all__ = [
    "as_float_array",
    "available_memory",
    "check_array",
    "check_int",
    "check_memory",
    "check_nonneg",
    "check_positive",
    "check_probability",
    "parse_numeric_table",
]


def _is_scalar(value: Any, kinds: tuple[type, ...], numpy_kinds: tuple[str, ...]) -> bool:
    """``value`` is one of ``kinds`` or of numpy's scalar types ``numpy_kinds`` (e.g. ``"integer"``),
    and no bool.  numpy is not imported for this: while it is not, no value can be a numpy scalar."""
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        kinds += tuple(getattr(numpy, k) for k in numpy_kinds)
    return not isinstance(value, bool) and isinstance(value, kinds)


def _as_float(value: Any, name: str) -> float:
    if not _is_scalar(value, (int, float), ("integer", "floating")):
        raise InvalidParameterError(f"expected a real number, got {type(value).__name__}", param=name)
    x = float(value)
    if math.isnan(x):
        raise InvalidParameterError("must be a number, got NaN", param=name)
    return x


def check_positive(value: Any, name: str, *, allow_inf: bool = False) -> float:
    """Return ``value`` as a float after checking it is > 0 (and finite unless ``allow_inf``)."""
    x = _as_float(value, name)
    if not (x > 0):
        raise InvalidParameterError("must be > 0", param=name)
    if math.isinf(x) and not allow_inf:
        raise InvalidParameterError("must be finite", param=name)
    return x


def check_nonneg(value: Any, name: str) -> float:
    """Return ``value`` as a finite float after checking it is >= 0."""
    x = _as_float(value, name)
    if not (x >= 0) or math.isinf(x):
        raise InvalidParameterError("must be a finite number >= 0", param=name)
    return x


def check_probability(value: Any, name: str, *, open_right: bool = True, open_left: bool = False) -> float:
    """Return ``value`` after checking it lies in [0, 1) (or the interval the flags select)."""
    x = _as_float(value, name)
    lo_ok = x > 0 if open_left else x >= 0
    hi_ok = x < 1 if open_right else x <= 1
    if not (lo_ok and hi_ok):
        lo = "(0" if open_left else "[0"
        hi = "1)" if open_right else "1]"
        raise InvalidParameterError(f"must lie in {lo}, {hi}", param=name)
    return x


#: δ at or above this is at least 1/n for every data set of n >= 2 records: the guarantee is void
#: whatever n is (derivation: :mod:`dpopt.accounting.delta`).
MAX_MEANINGFUL_DELTA = 0.5


def check_budget_delta(value: Any) -> float:
    """A budget's δ checked to lie in [0, 1); δ >= :data:`MAX_MEANINGFUL_DELTA` warns
    (:class:`~dpopt.exceptions.LargeDeltaWarning`)."""
    x = check_probability(value, "delta")
    if x >= MAX_MEANINGFUL_DELTA:
        warnings.warn(
            f"delta: {x:g} is at least {MAX_MEANINGFUL_DELTA:g}, hence at least 1/n for every data set of two "
            "or more records: the guarantee allows publishing whole records in the clear; use delta well below 1/n",
            LargeDeltaWarning,
            stacklevel=4,  # the caller of Budget(...)
        )
    return x


def check_int(value: Any, name: str, *, minimum: int = 1) -> int:
    """Return ``value`` as an int after checking it is an integer >= ``minimum``."""
    if not _is_scalar(value, (int,), ("integer",)):
        raise InvalidParameterError(f"expected an integer, got {type(value).__name__}", param=name)
    if int(value) < minimum:
        raise InvalidParameterError(f"must be an integer >= {minimum}", param=name)
    return int(value)


def _position(index: tuple[int, ...]) -> str:
    """'entry 3', 'row 2, column 5' or 'index (1, 2, 3)' (zero-based, as numpy indexes)."""
    if len(index) == 1:
        return f"entry {index[0]}"
    if len(index) == 2:
        return f"row {index[0]}, column {index[1]}"
    return f"index {index}"


def _ragged(value: Any) -> str | None:
    """Describe the first nesting level at which a nested sequence is ragged (no values quoted)."""
    level: list[Any] = [value]
    depth = 0
    while level:
        seqs = [v for v in level if isinstance(v, list | tuple | np.ndarray)]
        if not seqs:
            return None
        if len(seqs) != len(level):
            return f"mixes numbers and sequences at nesting depth {depth}"
        lengths = {len(v) for v in seqs}
        if len(lengths) > 1:
            first = len(seqs[0])
            bad = next(i for i, v in enumerate(seqs) if len(v) != first)
            if depth == 1:
                return (
                    f"rows have different lengths (row {bad} has {len(seqs[bad])} entries, row 0 has {first})"
                )
            return f"nested sequences at depth {depth} have different lengths"
        level = [x for v in seqs for x in v]
        depth += 1
    return None


def _first_unconvertible(value: Any, dtype: Any) -> str:
    """Say where ``value`` cannot be converted to ``dtype`` and what kind of thing is there."""
    if isinstance(value, str | bytes):
        return "is a string; pass numbers (an array or a list), not text"
    if isinstance(value, dict | set):
        return f"is a {type(value).__name__}; pass an array or a list of numbers"
    if isinstance(value, list | tuple):
        ragged = _ragged(value)
        if ragged is not None:
            return ragged
    try:
        obj = np.asarray(value, dtype=object)
    except (TypeError, ValueError):
        return "could not be read as an array"
    for index in np.ndindex(obj.shape):
        cell = obj[index]
        try:
            np.asarray(cell, dtype=dtype).item()
        except (TypeError, ValueError, OverflowError):
            where = _position(index) if index else "the value"
            if isinstance(cell, str | bytes):
                return f"{where} is text that is not a number"
            if isinstance(cell, complex | np.complexfloating):
                return f"{where} is a complex number (expected real numbers)"
            return f"{where} is a {type(cell).__name__}, not a number"
    return "could not be converted to numbers"


def as_float_array(
    value: Any,
    name: str,
    *,
    ndim: int | tuple[int, ...] | None = None,
    finite: bool = True,
    dtype: Any = "float64",
) -> NDArray[Any]:
    """Convert user data to a numeric array, checking dimension and finiteness.

    The one checked conversion for user data: on failure the :class:`InvalidParameterError` names
    ``name`` and the row/column (or entry) that failed, and says what kind of thing is there, but
    never quotes the value itself.

    Parameters
    ----------
    value
        Array-like of numbers.
    name
        The argument's name in the caller's terms (e.g. ``"histogram"``, ``"X"``).
    ndim
        Required number of dimensions (or a tuple of allowed ones); None accepts any.
    finite
        Reject NaN and infinite entries (reporting the first one's position).
    dtype
        Target dtype (float64 by default).

    Raises
    ------
    InvalidParameterError
        If the conversion fails, the dimension is wrong, or (``finite``) an entry is not finite.
    """
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", np.exceptions.ComplexWarning)
            arr: NDArray[Any] = np.asarray(value, dtype=dtype)
    except (TypeError, ValueError, OverflowError, np.exceptions.ComplexWarning):
        raise InvalidParameterError(
            f"{_first_unconvertible(value, dtype)}; expected an array of numbers", param=name
        ) from None
    if ndim is not None:
        allowed = (ndim,) if isinstance(ndim, int) else tuple(ndim)
        if arr.ndim not in allowed:
            want = " or ".join(f"{d}-d" for d in allowed)
            raise InvalidParameterError(f"expected a {want} array, got shape {arr.shape}", param=name)
    if finite and arr.dtype.kind in "fc":
        bad = ~np.isfinite(arr)
        if np.any(bad):
            first = tuple(int(i) for i in np.argwhere(bad)[0]) if arr.ndim else ()
            where = f" ({_position(first)} is the first)" if first else ""
            raise InvalidParameterError(
                f"contains NaN or infinite entries{where}; remove or impute them first", param=name
            )
    return arr


def numeric_or_refuse(call: Callable[[], T], **inputs: Any) -> T:
    """Run a third-party conversion of user data (e.g. scikit-learn's ``validate_data``).

    A ``ValueError`` it raises becomes an :class:`InvalidParameterError`: naming the input and the
    row/column that is not a number (or the ragged rows) when that is the cause, never quoting an
    entry: whether an input is numeric is decided by converting it here, not by reading the third
    party's message (which may quote one, as "could not convert string to float: ..." does).
    """
    try:
        return call()
    except ValueError as exc:
        if isinstance(exc, InvalidParameterError):
            raise
        for name, value in inputs.items():
            if isinstance(value, np.ndarray) and value.dtype.kind == "c":  # scikit-learn's message prints it
                raise InvalidParameterError(
                    "Complex data not supported; expected real numbers", param=name
                ) from None
            if not _numeric_by_type(value):
                as_float_array(value, name, finite=False)  # raises with the failing entry named
        raise InvalidParameterError(str(exc)) from None  # the inputs are numeric: not a conversion error


def _numeric_by_type(value: Any) -> bool:
    """A numeric numpy array (complex included) or a scipy.sparse matrix: numbers by construction."""
    if hasattr(value, "tocsr") and hasattr(value, "nnz"):
        return True
    return isinstance(value, np.ndarray) and value.dtype.kind in "biufc"


def check_array(
    value: Any, name: str, *, ndim: int | None = None, finite: bool = True, dtype: type = float
) -> NDArray[Any]:
    """Convert to a numpy array and check dimension and finiteness (see :func:`as_float_array`)."""
    return as_float_array(value, name, ndim=ndim, finite=finite, dtype=dtype)


def parse_numeric_table(text: str, name: str, *, delimiter: str | None = None) -> NDArray[np.float64]:
    """Parse delimited text (one row per line, ``#`` comments) into a 2-d float array.

    Errors name ``name``, the line and the column (1-based, as a text editor counts), never the
    text found there.  ``delimiter=None`` splits on whitespace.
    """
    rows: list[list[float]] = []
    width: int | None = None
    first_line = 0
    for lineno, line in enumerate(text.splitlines(), start=1):
        content = line.split("#", 1)[0].strip()
        if not content:
            continue
        fields = content.split(delimiter) if delimiter is not None else content.split()
        if width is None:
            width, first_line = len(fields), lineno
        elif len(fields) != width:
            raise InvalidParameterError(
                f"line {lineno} has {len(fields)} fields but line {first_line} has {width}", param=name
            )
        row: list[float] = []
        for col, field_text in enumerate(fields, start=1):
            try:
                row.append(float(field_text))
            except ValueError:
                what = "is empty" if not field_text.strip() else "is not a number"
                raise InvalidParameterError(f"line {lineno}, column {col} {what}", param=name) from None
        rows.append(row)
    if not rows:
        raise InvalidParameterError("contains no numbers", param=name)
    return np.asarray(rows, dtype=np.float64)


#: Fixed cap on one up-front allocation estimate when the machine's memory cannot be read.
MEMORY_FALLBACK_CAP = 64 * 2**30


def available_memory() -> int:
    """Bytes of physical memory (``os.sysconf``), or :data:`MEMORY_FALLBACK_CAP` if unknown."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return MEMORY_FALLBACK_CAP


def _human_bytes(n: float) -> str:
    for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n:.0f} bytes"


def check_memory(n_bytes: float, what: str, *, fix: str, fraction: float = 0.5) -> None:
    """Refuse up front when an allocation would need more than ``fraction`` of physical memory.

    Parameters
    ----------
    n_bytes
        Estimated bytes (use Python ints or floats: the estimate itself must not overflow).
    what
        What needs it, in the caller's terms, e.g. ``"n_rounds=10**12: the round history"``.
    fix
        How to fix it, e.g. ``"use fewer rounds"``.

    Raises
    ------
    InvalidParameterError
        With the estimate and the limit, e.g. "would need ~7.3 TiB for the round history ...".
    """
    limit = fraction * available_memory()
    if not n_bytes <= limit:
        raise InvalidParameterError(
            f"{what} would need ~{_human_bytes(float(n_bytes))} of memory, more than "
            f"{_human_bytes(limit)} ({fraction:.0%} of this machine's); {fix}"
        )
