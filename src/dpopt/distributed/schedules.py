"""Data-independent schedules for (private) ADMM: penalties η_i(r), dual steps θ_i(r), noise rates α_i(r).

A :class:`Schedule` evaluates to a (T, N) table (one row per round r = 1..T, one column per node).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from dpopt._validation import check_array, check_positive
from dpopt.exceptions import InvalidParameterError

__all__ = ["Schedule", "as_schedule", "geometric"]

Array = NDArray[np.float64]

# ----------------------------------------------------------------------------------------------
# Schedules
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class Schedule:
    """A data-independent per-node, per-round schedule v_i(r), r = 1..T.

    Build with :func:`geometric` (v_i(r) = v_i(1)·q_i^(r−1)), :meth:`constant`, :meth:`from_values`
    (an explicit table of shape (T,), (T, N) or (N,)) or :meth:`from_function` (``fn(r)`` returning a
    scalar or an (N,) array).
    """

    initial: Array | None = None
    ratio: Array | None = None
    values: Array | None = None
    function: Callable[[int], Any] | None = None
    label: str = ""

    @classmethod
    def constant(cls, value: float | ArrayLike) -> Schedule:
        """The same value(s) every round (scalar or one per node)."""
        return geometric(value, 1.0)

    @classmethod
    def from_values(cls, values: ArrayLike) -> Schedule:
        """An explicit table: shape (T,) (shared by all nodes), (T, N) or (N,) (constant per node)."""
        v = check_array(values, "values")
        if v.ndim not in (1, 2):
            raise InvalidParameterError("values: expected shape (T,), (N,) or (T, N)")
        return cls(values=v, label="table")

    @classmethod
    def from_function(cls, function: Callable[[int], Any], label: str = "function") -> Schedule:
        """``function(r)`` for r = 1..T, returning a scalar or one value per node."""
        if not callable(function):
            raise InvalidParameterError("function: expected a callable r -> value")
        return cls(function=function, label=label)

    def table(self, n_rounds: int, n_nodes: int, name: str = "schedule") -> Array:
        """The (T, N) table of values (validated: finite and > 0)."""
        r = np.arange(1, n_rounds + 1, dtype=np.float64)[:, None]
        if self.initial is not None:
            ratio = self.ratio if self.ratio is not None else np.ones(1)
            out = _per_node(self.initial, n_nodes, name)[None, :] * _per_node(ratio, n_nodes, name) ** (r - 1)
        elif self.values is not None:
            v = self.values
            if v.ndim == 2:
                if v.shape != (n_rounds, n_nodes):
                    raise InvalidParameterError(f"{name}: table must have shape ({n_rounds}, {n_nodes})")
                out = v.astype(np.float64)
            elif v.shape[0] == n_rounds:
                out = np.repeat(v[:, None], n_nodes, axis=1).astype(np.float64)
            elif v.shape[0] == n_nodes:
                out = np.repeat(v[None, :], n_rounds, axis=0).astype(np.float64)
            else:
                raise InvalidParameterError(f"{name}: a 1-d table needs length T={n_rounds} or N={n_nodes}")
        elif self.function is not None:
            rows = [
                np.broadcast_to(np.asarray(self.function(k), dtype=np.float64), (n_nodes,))
                for k in range(1, n_rounds + 1)
            ]
            out = np.array(rows)
        else:
            raise InvalidParameterError(f"{name}: empty schedule")
        if not np.all(np.isfinite(out)) or np.any(out <= 0):
            raise InvalidParameterError(f"{name}: every value must be finite and > 0")
        return np.ascontiguousarray(out)

    def describe(self) -> str:
        """Short public description for result parameters."""
        if self.initial is not None:
            ini = self.initial.tolist() if self.initial.size > 1 else float(self.initial[0])
            q = (
                self.ratio.tolist()
                if self.ratio is not None and self.ratio.size > 1
                else float(self.ratio[0] if self.ratio is not None else 1.0)
            )
            return f"geometric(initial={ini}, ratio={q})"
        return self.label or "table"


def _per_node(v: Any, n_nodes: int, name: str) -> Array:
    a = np.atleast_1d(np.asarray(v, dtype=np.float64))
    if a.size == 1:
        return np.full(n_nodes, float(a[0]))
    if a.shape != (n_nodes,):
        raise InvalidParameterError(f"{name}: expected a scalar or one value per node ({n_nodes})")
    return a


def geometric(initial: float | ArrayLike, ratio: float | ArrayLike = 1.0) -> Schedule:
    """v_i(r) = initial_i · ratio_i^(r−1) (scalars are shared by all nodes)."""
    ini = check_array(np.atleast_1d(np.asarray(initial, dtype=float)), "initial", ndim=1)
    q = check_array(np.atleast_1d(np.asarray(ratio, dtype=float)), "ratio", ndim=1)
    if np.any(ini <= 0) or np.any(q <= 0):
        raise InvalidParameterError("geometric: initial values and ratios must be > 0")
    return Schedule(initial=ini, ratio=q, label="geometric")


def as_schedule(value: Any, name: str) -> Schedule:
    """A :class:`Schedule` from a schedule, a function of the round, a positive number (constant) or an
    array of values (``name``: the parameter named in errors)."""
    if isinstance(value, Schedule):
        return value
    if callable(value):
        return Schedule.from_function(value)
    if np.isscalar(value):
        check_positive(value, name)
        return geometric(value, 1.0)
    arr = check_array(value, name)
    return Schedule.from_values(arr)
