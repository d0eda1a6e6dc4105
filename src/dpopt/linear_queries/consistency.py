"""Non-negative, mutually consistent answers: post-processing of a release (no privacy cost).

The least-squares answers of the matrix mechanism are consistent (they come from one estimate)
but may be negative.  Two projections fix that without touching the data again:

* :func:`nonnegative_tables` -- unions of products (marginals, ranges x marginals): the
  estimated marginal tables on every part's attributes are projected (Euclidean norm over all
  table cells) onto the tables that are non-negative *and* agree on every shared sub-marginal,
  by Dykstra's alternating projections between "non-negative" (clip) and "consistent" (average
  the residual components ``(⊗_{i∈T} P1) marginal_T`` that tables share).  Nothing is formed on
  the full domain.
* :func:`nonnegative_histogram` -- dense strategies: the histogram estimate is projected onto
  ``x >= 0`` in the strategy's metric, ``min_{x >= 0} (x - x̂)ᵀ AᵀA (x - x̂)`` (generalized
  least squares with the sign constraint, L-BFGS-B).

Both are projections onto convex sets that contain the true counts, so (in the norm of the
projection) the result is never farther from the truth than the least-squares estimate; the
reported ``expected_error`` stays the least-squares figure.  Their effect on the workload's
error is measured in ``docs/linear_queries_benchmark.md``.

Privacy
-------
Post-processing of the released measurements only: no privacy cost, whatever the iterations do.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from dpopt.exceptions import InvalidParameterError

__all__ = ["nonnegative_histogram", "nonnegative_tables"]

FloatArray = NDArray[np.float64]
Subset = tuple[int, ...]


def _residual(table: FloatArray, S: Subset, T: Subset, dims: Sequence[int]) -> FloatArray:
    """``(⊗_{i∈T} P1) marginal_T(table)`` for a table on the sorted attributes S."""
    axes_out = tuple(k for k, i in enumerate(S) if i not in T)
    r = table.sum(axis=axes_out) if axes_out else table
    for k in range(len(T)):
        r = r - r.mean(axis=k, keepdims=True)
    return np.asarray(r)


def _spread(r: FloatArray, T: Subset, S: Subset, dims: Sequence[int]) -> FloatArray:
    """The residual of T spread evenly over the attributes of S outside T (a table on S)."""
    idx = tuple(slice(None) if i in T else np.newaxis for i in S)
    n_out = math.prod(dims[i] for i in S if i not in T)
    return np.broadcast_to(r[idx] / n_out, tuple(dims[i] for i in S))


def _make_consistent(tables: Mapping[Subset, FloatArray], dims: Sequence[int]) -> dict[Subset, FloatArray]:
    """Euclidean projection of tables onto the consistent ones: shared residuals averaged."""
    comps: dict[Subset, list[tuple[FloatArray, float]]] = {}
    for S, tab in tables.items():
        for r in range(len(S) + 1):
            for T in itertools.combinations(S, r):
                w = 1.0 / math.prod(dims[i] for i in S if i not in T)  # ‖spread(r)‖² = w‖r‖²
                comps.setdefault(T, []).append((_residual(tab, S, T, dims), w))
    mean = {T: sum(w * r for r, w in lst) / sum(w for _, w in lst) for T, lst in comps.items()}
    out = {}
    for S in tables:
        acc = np.zeros(tuple(dims[i] for i in S))
        for r in range(len(S) + 1):
            for T in itertools.combinations(S, r):
                acc = acc + _spread(np.asarray(mean[T]), T, S, dims)
        out[S] = acc
    return out


def nonnegative_tables(
    tables: Mapping[Subset, FloatArray],
    dims: Sequence[int],
    *,
    max_iter: int = 2000,
    tol: float = 1e-7,
) -> tuple[dict[Subset, FloatArray], dict[str, Any]]:
    """Project consistent marginal tables onto the non-negative consistent ones (Dykstra).

    Parameters
    ----------
    tables : mapping sorted attribute subset -> array
        Estimated marginal tables (axes in sorted attribute order), e.g. from a release.
    dims : sequence of int
        Attribute sizes.
    max_iter, tol : int, float
        Iteration cap and stopping rule (largest inconsistency and negativity, relative to the
        largest table entry).

    Returns
    -------
    (tables, info)
        Consistent tables (shared sub-marginals agree exactly) whose entries are non-negative
        up to ``info["max_negative"]`` (clipped to 0 at the end; ``info["max_inconsistency"]``
        reports what that clipping left), and the iteration count.

    Privacy
    -------
    Post-processing only (no privacy cost).

    Examples
    --------
    >>> import numpy as np
    >>> from dpopt.linear_queries.consistency import nonnegative_tables
    >>> t = {(0,): np.array([5.0, -1.0]), (0, 1): np.array([[3.0, 2.0], [-0.5, -0.5]])}
    >>> out, info = nonnegative_tables(t, (2, 2))
    >>> bool(np.all(out[(0, 1)] >= 0)), np.allclose(out[(0, 1)].sum(axis=1), out[(0,)])
    (True, True)
    """
    if not tables:
        raise InvalidParameterError("tables: need at least one table")
    keys = [tuple(sorted(S)) for S in tables]
    x = {S: np.asarray(tables[S], dtype=np.float64).reshape(tuple(dims[i] for i in S)) for S in keys}
    scale = max(1.0, max(float(np.max(np.abs(t))) for t in x.values()))
    p = {S: np.zeros_like(t) for S, t in x.items()}
    q = {S: np.zeros_like(t) for S, t in x.items()}
    y = x
    iterations = 0
    change = math.inf
    for _ in range(max_iter):
        iterations += 1
        y = _make_consistent({S: x[S] + p[S] for S in keys}, dims)
        p = {S: x[S] + p[S] - y[S] for S in keys}
        x_new = {S: np.maximum(y[S] + q[S], 0.0) for S in keys}
        q = {S: y[S] + q[S] - x_new[S] for S in keys}
        change = max(float(np.max(np.abs(x_new[S] - y[S]))) for S in keys) / scale
        x = x_new
        if change <= tol:
            break
    final = _make_consistent(x, dims)
    negative = max(float(-np.min(t)) for t in final.values())
    clipped = {S: np.maximum(t, 0.0) for S, t in final.items()}
    inconsistency = max(float(np.max(np.abs(clipped[S] - final[S]))) for S in keys)
    info = {
        "iterations": iterations,
        "converged": change <= tol,
        "max_negative": max(negative, 0.0),
        "max_inconsistency": inconsistency,
    }
    return clipped, info


def nonnegative_histogram(
    x_hat: FloatArray, gram: FloatArray, *, max_iter: int = 5000, tol: float = 1e-10
) -> FloatArray:
    """``argmin_{x >= 0} (x - x̂)ᵀ G (x - x̂)`` with ``G = AᵀA`` (L-BFGS-B; dense strategies).

    Privacy
    -------
    Post-processing only (no privacy cost).
    """
    import scipy.optimize as sopt

    xh = np.asarray(x_hat, dtype=np.float64)
    G = np.asarray(gram, dtype=np.float64)
    if G.shape != (xh.size, xh.size):
        raise InvalidParameterError("gram: expected an (n, n) matrix matching the histogram estimate")
    scale = float(np.max(np.abs(np.diag(G)))) or 1.0

    def fg(x: FloatArray) -> tuple[float, FloatArray]:
        d = x - xh
        Gd = G @ d / scale
        return float(d @ Gd), 2.0 * Gd

    res = sopt.minimize(
        fg,
        np.maximum(xh, 0.0),
        jac=True,
        method="L-BFGS-B",
        bounds=[(0.0, None)] * xh.size,
        options={"maxiter": max_iter, "ftol": tol, "gtol": 1e-12},
    )
    return np.maximum(np.asarray(res.x, dtype=np.float64), 0.0)
