"""Low-rank matrix factorization of a sparse rating matrix: the partially separable problem of HAMSI.

Given observed ratings ``Ω = {(a, b, y_ab)}`` of an ``n_rows x n_cols`` matrix, find factors
``U`` (n_rows x rank) and ``V`` (n_cols x rank) minimising

.. math::

    f(U, V) = \\frac{w}{2} \\sum_{(a,b) \\in Ω} (y_{ab} - U_a \\cdot V_b)^2
              + \\frac{\\lambda}{2} (\\|U\\|_F^2 + \\|V\\|_F^2)

with ``w = 1/|Ω|`` (``scaling="mean"``, the default: the 1/(2|Ω|) objective of the authors' C++
code, for which HAMSI's constants η = 0.06, γ = 0.51 were tuned; spec note N5) or ``w = 2``
(``scaling="sum"``: the plain sum of squares of eq. (3.1) of the thesis).  ``λ = l2`` (default 0, as
in the thesis).  The function of rating ``(a, b)`` depends only on row ``a`` of ``U`` and row ``b``
of ``V`` (the "column" ``b`` of the thesis's ``X2 = V^T``): the problem is partially separable, which
is what :mod:`dpopt.distributed.partition` and :func:`dpopt.solvers.hamsi.hamsi` exploit.

The flat parameter vector used by the solvers is ``x = [U.ravel(), V.ravel()]``.

Gradients are computed by compiled kernels (numba, GIL released) whose results do not depend on the
number of threads.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from numpy.typing import NDArray

from dpopt._validation import (
    as_float_array,
    check_int,
    check_memory,
    check_nonneg,
    check_positive,
    check_probability,
)
from dpopt.datasets import Ratings
from dpopt.exceptions import InvalidParameterError
from dpopt.randomness import RNGLike, as_generator

__all__ = ["MatrixFactorizationProblem", "split_ratings"]

_N_CHUNKS = 64  # fixed chunking of reductions: results independent of the thread count


def _kernels() -> Any:
    # imported lazily: dpopt.solvers may import this module
    from dpopt.solvers import _mf_kernels

    return _mf_kernels


def _check_index_array(value: Any, name: str) -> NDArray[np.int64]:
    try:
        arr = np.asarray(value)
    except (TypeError, ValueError):  # ragged
        arr = np.asarray([], dtype=object)
    if arr.dtype.kind not in "iuf":
        arr = as_float_array(value, name, finite=False)  # names the entry that is not a number
    if arr.ndim != 1:
        raise InvalidParameterError(f"{name}: expected a 1-d array of indices, got shape {arr.shape}")
    if arr.size and arr.dtype.kind == "f":
        if not np.all(np.isfinite(arr)) or np.any(arr != np.floor(arr)):
            raise InvalidParameterError(f"{name}: indices must be whole numbers")
    elif arr.size and arr.dtype.kind not in "iu":
        raise InvalidParameterError(f"{name}: expected integer indices, got dtype {arr.dtype}")
    return arr.astype(np.int64)


@dataclass(frozen=True, eq=False)
class MatrixFactorizationProblem:
    """Sparse low-rank matrix factorization (see module docstring for the objective).

    Parameters
    ----------
    ratings : Ratings
        Observed entries (zero-based ``rows``/``cols``); see :func:`dpopt.datasets.load_movielens`,
        :func:`dpopt.datasets.make_low_rank_ratings` or :meth:`from_arrays`.
    rank : int
        Latent dimension ``L`` (50 in the thesis), ``>= 1``.
    l2 : float, default 0.0
        Ridge weight ``λ >= 0`` on both factors.
    scaling : {"mean", "sum"}, default "mean"
        ``"mean"``: data term ``(1/(2|Ω|)) Σ r²`` (use with HAMSI's published constants);
        ``"sum"``: ``Σ r²`` as printed in the thesis.
    allow_empty : bool, default False
        Whether rows or columns without any rating are allowed.  Their factors only see the
        regularizer (or stay at their initial value when ``l2 = 0``) and the training RMSE ignores
        them; by default they are rejected because they usually mean ids were not re-indexed.
    grid : int, default 4
        The compiled kernels lay the ratings out on a ``grid x grid`` array of row and column
        intervals balanced by rating counts (the STRATA-B construction); the ``grid`` blocks of a
        stratum run in parallel and the strata one after the other, so at most ``grid`` threads are
        used for sets of ratings that are not already split into variable-disjoint blocks (use
        ``grid >= n_threads``; each stratum costs one thread rendezvous).  Results do not depend on
        the thread count, only on ``grid``.

    Attributes
    ----------
    rows, cols, values : ndarray
        The ratings in the kernels' layout (stratum by stratum, block by block, each block sorted
        by (row, col)).
    row_cuts, col_cuts : ndarray of int64
        The ``grid + 1`` interval boundaries.

    Raises
    ------
    InvalidParameterError
        For ``rank <= 0``, negative ``l2``, an unknown ``scaling``, no ratings, or (unless
        ``allow_empty``) empty rows or columns.
    """

    ratings: Ratings
    rank: int
    l2: float = 0.0
    scaling: Literal["mean", "sum"] = "mean"
    allow_empty: bool = False
    grid: int = 4
    # derived: the kernels' stratified layout
    rows: NDArray[np.int64] = field(init=False, repr=False)
    cols: NDArray[np.int64] = field(init=False, repr=False)
    values: NDArray[np.float64] = field(init=False, repr=False)
    row_cuts: NDArray[np.int64] = field(init=False, repr=False)
    col_cuts: NDArray[np.int64] = field(init=False, repr=False)
    _ptr: NDArray[np.int64] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.ratings, Ratings):
            raise InvalidParameterError(
                "ratings: expected a dpopt.datasets.Ratings; build one with "
                "MatrixFactorizationProblem.from_arrays(rows, cols, values, rank=...)"
            )
        object.__setattr__(self, "rank", check_int(self.rank, "rank", minimum=1))
        object.__setattr__(self, "l2", check_nonneg(self.l2, "l2"))
        if self.scaling not in ("mean", "sum"):
            raise InvalidParameterError("scaling: must be 'mean' (1/(2|Ω|) Σ r², default) or 'sum' (Σ r²)")
        r = self.ratings
        if r.n_ratings == 0:
            raise InvalidParameterError("ratings: contains no ratings")
        if not np.all(np.isfinite(r.values)):
            raise InvalidParameterError("ratings: values contain NaN or infinite entries")
        n_rows, n_cols = r.shape
        if not self.allow_empty:
            empty_r = int(np.count_nonzero(np.bincount(r.rows, minlength=n_rows) == 0))
            empty_c = int(np.count_nonzero(np.bincount(r.cols, minlength=n_cols) == 0))
            if empty_r or empty_c:
                raise InvalidParameterError(
                    f"ratings: {empty_r} of {n_rows} rows and {empty_c} of {n_cols} columns have no "
                    "rating; re-index ids to the ones that occur (as load_movielens does) or pass "
                    "allow_empty=True"
                )
        object.__setattr__(self, "grid", check_int(self.grid, "grid"))
        k = _kernels()
        row_cuts = k.balanced_cuts(np.bincount(r.rows, minlength=n_rows), self.grid)
        col_cuts = k.balanced_cuts(np.bincount(r.cols, minlength=n_cols), self.grid)
        order, ptr = k.stratify(r.rows, r.cols, row_cuts, col_cuts)
        object.__setattr__(self, "rows", np.ascontiguousarray(r.rows[order], dtype=np.int64))
        object.__setattr__(self, "cols", np.ascontiguousarray(r.cols[order], dtype=np.int64))
        object.__setattr__(self, "values", np.ascontiguousarray(r.values[order], dtype=np.float64))
        object.__setattr__(self, "row_cuts", row_cuts)
        object.__setattr__(self, "col_cuts", col_cuts)
        object.__setattr__(self, "_ptr", ptr)

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_arrays(
        cls,
        rows: Any,
        cols: Any,
        values: Any,
        *,
        rank: int,
        shape: tuple[int, int] | None = None,
        l2: float = 0.0,
        scaling: Literal["mean", "sum"] = "mean",
        allow_empty: bool = False,
        grid: int = 4,
    ) -> MatrixFactorizationProblem:
        """Build the problem from zero-based coordinate arrays (checked: out-of-range ids raise).

        ``shape`` defaults to ``(max(rows) + 1, max(cols) + 1)``.
        """
        rr = _check_index_array(rows, "rows")
        cc = _check_index_array(cols, "cols")
        vv = as_float_array(values, "values", ndim=1)
        if not (rr.shape == cc.shape == vv.shape):
            raise InvalidParameterError(
                f"rows, cols, values: expected 1-d arrays of the same length, got lengths "
                f"{rr.shape[0]}, {cc.shape[0]} and {vv.shape[0]}"
            )
        if vv.size == 0:
            raise InvalidParameterError("ratings: contains no ratings")
        if rr.min() < 0 or cc.min() < 0:
            raise InvalidParameterError("rows, cols: ids must be zero-based non-negative indices")
        if shape is None:
            shp = (int(rr.max()) + 1, int(cc.max()) + 1)
        else:
            if len(shape) != 2:
                raise InvalidParameterError("shape: expected a pair (n_rows, n_cols)")
            shp = (check_int(shape[0], "shape[0]"), check_int(shape[1], "shape[1]"))
            if rr.max() >= shp[0] or cc.max() >= shp[1]:
                n_bad = int(np.count_nonzero((rr >= shp[0]) | (cc >= shp[1])))
                raise InvalidParameterError(
                    f"rows, cols: {n_bad} ratings have ids outside shape {shp}; ids must be zero-based "
                    "and smaller than the matrix dimensions"
                )
        ratings = Ratings(rows=rr, cols=cc, values=vv, shape=shp, name="user")
        return cls(ratings, rank, l2=l2, scaling=scaling, allow_empty=allow_empty, grid=grid)

    # ------------------------------------------------------------------ sizes and layout
    @property
    def shape(self) -> tuple[int, int]:
        """``(n_rows, n_cols)`` of the rating matrix."""
        return self.ratings.shape

    @property
    def n_ratings(self) -> int:
        """``|Ω|``."""
        return int(self.values.shape[0])

    @property
    def n_params(self) -> int:
        """Length of the flat parameter vector ``(n_rows + n_cols) * rank``."""
        return (self.shape[0] + self.shape[1]) * self.rank

    @property
    def weight(self) -> float:
        """``w`` in the objective: ``1/|Ω|`` (mean scaling) or ``2`` (sum scaling)."""
        return 1.0 / self.n_ratings if self.scaling == "mean" else 2.0

    def unpack(self, x: NDArray[np.float64]) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """Views ``(U, V)`` into the flat vector ``x`` (no copy)."""
        n_rows, n_cols = self.shape
        if x.shape != (self.n_params,):
            raise InvalidParameterError(f"x: expected shape ({self.n_params},), got {x.shape}")
        cut = n_rows * self.rank
        return x[:cut].reshape(n_rows, self.rank), x[cut:].reshape(n_cols, self.rank)

    def pack(self, U: Any, V: Any) -> NDArray[np.float64]:
        """Flat vector ``[U.ravel(), V.ravel()]`` (a new array), after checking shapes."""
        U_, V_ = self._check_factors(U, V)
        return np.concatenate([U_.ravel(), V_.ravel()])

    def init_factors(
        self, *, rng: RNGLike, scale: float = 1.0
    ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """Random factors with i.i.d. ``N(0, scale²)`` entries (``scale = 1`` as in the reference code)."""
        s = check_positive(scale, "scale")
        gen = as_generator(rng)
        n_rows, n_cols = self.shape
        check_memory(
            8.0 * (n_rows + n_cols) * self.rank * 2,
            f"rank={self.rank}: the factors of a {n_rows} x {n_cols} matrix",
            fix="use a smaller rank",
        )
        U = s * gen.standard_normal((n_rows, self.rank))
        V = s * gen.standard_normal((n_cols, self.rank))
        return U, V

    def _check_factors(self, U: Any, V: Any) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        U_ = np.ascontiguousarray(as_float_array(U, "U", finite=False))
        V_ = np.ascontiguousarray(as_float_array(V, "V", finite=False))
        n_rows, n_cols = self.shape
        if U_.shape != (n_rows, self.rank) or V_.shape != (n_cols, self.rank):
            raise InvalidParameterError(
                f"U, V: expected shapes ({n_rows}, {self.rank}) and ({n_cols}, {self.rank}), "
                f"got {U_.shape} and {V_.shape}"
            )
        return U_, V_

    # ------------------------------------------------------------------ evaluation
    def sse(self, U: Any, V: Any, ratings: Ratings | None = None) -> float:
        """Sum of squared residuals over ``ratings`` (default: the training ratings)."""
        U_, V_ = self._check_factors(U, V)
        k = _kernels()
        if ratings is None:
            rows, cols, vals, ptr = self.rows, self.cols, self.values, self._ptr
        else:
            if not isinstance(ratings, Ratings) or ratings.shape != self.shape:
                raise InvalidParameterError(
                    f"ratings: expected a Ratings of shape {self.shape} (same users and items)"
                )
            rows = np.ascontiguousarray(ratings.rows, dtype=np.int64)
            cols = np.ascontiguousarray(ratings.cols, dtype=np.int64)
            vals = np.ascontiguousarray(ratings.values, dtype=np.float64)
            ptr = np.linspace(0, rows.shape[0], _N_CHUNKS + 1).round().astype(np.int64)
        out = np.zeros(ptr.shape[0] - 1)
        k.sse_chunks(U_, V_, rows, cols, vals, ptr, out)
        return float(out.sum())

    def rmse(self, U: Any, V: Any, ratings: Ratings | None = None) -> float:
        """Root-mean-square error over ``ratings`` (default: training RMSE, as in the thesis)."""
        n = self.n_ratings if ratings is None else ratings.n_ratings
        if n == 0:
            raise InvalidParameterError("ratings: contains no ratings")
        return math.sqrt(self.sse(U, V, ratings) / n)

    def loss(self, U: Any, V: Any) -> float:
        """Objective value ``f(U, V)``."""
        U_, V_ = self._check_factors(U, V)
        val = 0.5 * self.weight * self.sse(U_, V_)
        if self.l2:
            val += 0.5 * self.l2 * (float(np.vdot(U_, U_)) + float(np.vdot(V_, V_)))
        return val

    def gradient(
        self, U: Any, V: Any, *, n_threads: int = 1
    ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """Full gradient ``(∂f/∂U, ∂f/∂V)`` (compiled; strata in sequence, blocks on ``n_threads`` threads).

        The result is bit-for-bit the same for every ``n_threads``.
        """
        U_, V_ = self._check_factors(U, V)
        check_int(n_threads, "n_threads")
        k = _kernels()
        gU = np.zeros_like(U_)
        gV = np.zeros_like(V_)
        sse = np.zeros(self._ptr.shape[0] - 1)
        with k.BlockRunner(n_threads) as run:
            run(U_, V_, self.rows, self.cols, self.values, self._ptr, self.grid, self.weight, gU, gV, sse)
        if self.l2:
            gU += self.l2 * U_
            gV += self.l2 * V_
        return gU, gV


def split_ratings(ratings: Ratings, test_fraction: float = 0.2, *, rng: RNGLike) -> tuple[Ratings, Ratings]:
    """Random train/test split of the ratings (e.g. the 80/20 held-out split of the HAMSI experiments).

    Every row and column that has a rating keeps at least one in the training part (a rating drawn
    for the test part is moved back when it is the only one of its row or column), so a model fitted
    on the training part has a factor for every test rating.  Both parts keep ``shape``.

    Parameters
    ----------
    ratings : Ratings
    test_fraction : float, default 0.2
        Target fraction in ``(0, 1)``; the realised fraction can be slightly smaller.
    rng : int, Generator, "secure" or None
    """
    if not isinstance(ratings, Ratings):
        raise InvalidParameterError("ratings: expected a dpopt.datasets.Ratings")
    frac = check_probability(test_fraction, "test_fraction", open_left=True)
    gen = as_generator(rng)
    n = ratings.n_ratings
    perm = gen.permutation(n)
    is_test = np.zeros(n, dtype=bool)
    is_test[perm[: round(frac * n)]] = True
    for idx, size in ((ratings.rows, ratings.shape[0]), (ratings.cols, ratings.shape[1])):
        train_count = np.bincount(idx[~is_test], minlength=size)
        # first test rating (in permuted order) of each index with no training rating goes back
        cand = perm[is_test[perm]]
        need = train_count[idx[cand]] == 0
        cand = cand[need]
        _, first = np.unique(idx[cand], return_index=True)
        is_test[cand[first]] = False

    def part(mask: NDArray[np.bool_], suffix: str) -> Ratings:
        return Ratings(
            rows=ratings.rows[mask].copy(),
            cols=ratings.cols[mask].copy(),
            values=ratings.values[mask].copy(),
            shape=ratings.shape,
            name=f"{ratings.name}-{suffix}",
            description=f"{suffix} part of a random split ({frac:g} held out) of: {ratings.description}",
            bounds=dict(ratings.bounds),
            row_ids=ratings.row_ids,
            col_ids=ratings.col_ids,
        )

    return part(~is_test, "train"), part(is_test, "test")
