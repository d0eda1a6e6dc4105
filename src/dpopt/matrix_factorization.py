"""Low-rank matrix factorization of a sparse rating matrix: the partially separable problem of HAMSI.

Given observed ratings ``Ω = {(a, b, y_ab)}`` of an ``n_rows x n_cols`` matrix, find factors
``U`` (n_rows x rank) and ``V`` (n_cols x rank) -- and, for the biased model (``bias=True``), row and
column biases ``p`` and ``q`` -- minimising

.. math::

    f = \\frac{w}{2} \\sum_{(a,b) \\in Ω} (y_{ab} - μ - p_a - q_b - U_a \\cdot V_b)^2
        + \\frac{\\lambda}{2} (\\|U\\|_F^2 + \\|V\\|_F^2) + \\frac{\\lambda_b}{2} (\\|p\\|^2 + \\|q\\|^2)

with ``w = 1/|Ω|`` (``scaling="mean"``, the default: the 1/(2|Ω|) objective of the authors' C++
code, for which HAMSI's constants η = 0.06, γ = 0.51 were tuned; spec note N5) or ``w = 2``
(``scaling="sum"``: the plain sum of squares of eq. (3.1) of the thesis).  ``λ = l2`` and
``λ_b = l2_bias`` (default ``l2``).  ``μ = offset`` is a constant (the training mean for the biased
model, 0 otherwise).  The seed's model is ``bias=False, l2=0`` (the defaults of this class).

**Scale of the ridge weight.**  ``l2`` multiplies the *objective as scaled above*.  The usual
convention of ALS libraries (cmfrec, implicit, Spark without count weighting) is
``Σ r² + λ_ALS (‖U‖² + ‖V‖²)``; it is the same objective up to a factor with
``l2 = w · λ_ALS`` (``λ_ALS / |Ω|`` under mean scaling).  :meth:`MatrixFactorizationProblem.from_als_lambda`
and :class:`dpopt.recommender.MFRecommender` take ``λ_ALS`` directly.

The function of rating ``(a, b)`` depends only on row ``a`` of ``U`` and row ``b``
of ``V`` (the "column" ``b`` of the thesis's ``X2 = V^T``): the problem is partially separable, which
is what :mod:`dpopt.distributed.partition` and :func:`dpopt.solvers.hamsi.hamsi` exploit.

**Working factors.**  The solvers work on ``width``-column matrices: ``U`` and ``V`` themselves
without biases, and ``[U | p | 1]``, ``[V | 1 | q]`` with biases (``width = rank + 2``; the product
of two such rows is ``U_a·V_b + p_a + q_b`` and the columns of ones have zero gradient, so they
never move).  The flat parameter vector used by the solvers is ``x = [U_w.ravel(), V_w.ravel()]``;
:meth:`~MatrixFactorizationProblem.split` returns ``(U, V, p, q)``.

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
        Ridge weight ``λ >= 0`` on both factors, on the scale of the objective (``w · λ_ALS``; see
        the module docstring).
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
    bias : bool, default False
        Add a row bias ``p_a`` and a column bias ``q_b`` to every prediction (the model of
        recommender libraries).  ``False`` is the seed's model.
    l2_bias : float or None, default None
        Ridge weight ``λ_b`` of the biases (same scale as ``l2``); ``None`` uses ``l2``.
    offset : float or None, default None
        The constant ``μ`` subtracted from every rating; ``None``: the mean training rating with
        ``bias=True``, ``0`` without.
    clip : (float, float) or None, default None
        Predictions are clipped to this interval (e.g. the rating scale ``(1, 5)``) by
        :meth:`predict` and by the held-out RMSE (``rmse(..., ratings=...)``); the training
        objective and the training RMSE use the unclipped model.
    l2_weighting : {"uniform", "count"}, default "uniform"
        ``"uniform"``: every row and column has the ridge weights ``l2`` / ``l2_bias``.
        ``"count"``: row ``a``'s weights are multiplied by its number of training ratings ``n_a``
        (and column ``b``'s by ``n_b``): the "weighted-λ" regularization of ALS-WR (Zhou et al.,
        2008), which Spark MLlib's ALS uses; the ridge part becomes
        ``(λ/2) Σ_a n_a ‖U_a‖² + (λ/2) Σ_b n_b ‖V_b‖²`` (biases alike with ``λ_b``).  Its ``λ`` is
        on a per-rating scale, so good values are about ``1 / (mean ratings per row)`` times the
        uniform ones.  Supported by :func:`dpopt.solvers.als.als` and by :meth:`loss` /
        :meth:`gradient`; HAMSI, mb-GD and the distributed path raise for it.

    Attributes
    ----------
    rows, cols, values : ndarray
        The ratings in the kernels' layout (stratum by stratum, block by block, each block sorted
        by (row, col)); ``values`` has ``offset`` subtracted.
    row_cuts, col_cuts : ndarray of int64
        The ``grid + 1`` interval boundaries.
    width : int
        Columns of the working factors: ``rank`` (+ 2 with biases).

    Raises
    ------
    InvalidParameterError
        For ``rank <= 0``, negative ``l2``, an unknown ``scaling``, no ratings, or (unless
        ``allow_empty``) empty rows or columns.

    Examples
    --------
    >>> from dpopt.datasets import make_low_rank_ratings
    >>> r = make_low_rank_ratings(40, 30, 2, 0.5, rng=0)
    >>> p = MatrixFactorizationProblem(r, 3, bias=True, l2=1e-3)
    >>> U, V = p.init_factors(rng=0)
    >>> U.shape, p.width
    ((40, 5), 5)
    >>> U0, V0, row_bias, col_bias = p.split(U, V)
    >>> U0.shape, float(abs(row_bias).max())
    ((40, 3), 0.0)
    """

    ratings: Ratings
    rank: int
    l2: float = 0.0
    scaling: Literal["mean", "sum"] = "mean"
    allow_empty: bool = False
    grid: int = 4
    bias: bool = False
    l2_bias: float | None = None
    offset: float | None = None
    clip: tuple[float, float] | None = None
    l2_weighting: Literal["uniform", "count"] = "uniform"
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
        if self.l2_weighting not in ("uniform", "count"):
            raise InvalidParameterError(
                "l2_weighting: must be 'uniform' (one ridge weight for all rows) or 'count' "
                "(ridge times each row's/column's number of ratings, ALS-WR)"
            )
        if not isinstance(self.bias, bool | np.bool_):
            raise InvalidParameterError("bias: expected True or False")
        object.__setattr__(self, "bias", bool(self.bias))
        l2b = self.l2 if self.l2_bias is None else check_nonneg(self.l2_bias, "l2_bias")
        object.__setattr__(self, "l2_bias", l2b)
        r = self.ratings
        if r.n_ratings == 0:
            raise InvalidParameterError("ratings: contains no ratings")
        vals = np.asarray(r.values)
        if not np.all(np.isfinite(vals)):
            raise InvalidParameterError("ratings: values contain NaN or infinite entries")
        if self.offset is None:
            mu = float(np.mean(vals, dtype=np.float64)) if self.bias else 0.0
        else:
            mu = float(self.offset)
            if not math.isfinite(mu):
                raise InvalidParameterError("offset: must be a finite number or None")
        object.__setattr__(self, "offset", mu)
        if self.clip is not None:
            try:
                lo, hi = (float(v) for v in self.clip)
            except (TypeError, ValueError):
                raise InvalidParameterError("clip: expected a pair (low, high) or None") from None
            if not (lo < hi):
                raise InvalidParameterError("clip: expected low < high")
            object.__setattr__(self, "clip", (lo, hi))
        n_rows, n_cols = r.shape
        row_counts = np.bincount(r.rows, minlength=n_rows)
        col_counts = np.bincount(r.cols, minlength=n_cols)
        if not self.allow_empty:
            empty_r = int(np.count_nonzero(row_counts == 0))
            empty_c = int(np.count_nonzero(col_counts == 0))
            if empty_r or empty_c:
                raise InvalidParameterError(
                    f"ratings: {empty_r} of {n_rows} rows and {empty_c} of {n_cols} columns have no "
                    "rating; re-index ids to the ones that occur (as load_movielens does) or pass "
                    "allow_empty=True"
                )
        object.__setattr__(self, "grid", check_int(self.grid, "grid"))
        k = _kernels()
        row_cuts = k.balanced_cuts(row_counts, self.grid)
        col_cuts = k.balanced_cuts(col_counts, self.grid)
        order, ptr = k.stratify(r.rows, r.cols, row_cuts, col_cuts)
        # the layout is the only copy of the ratings (memory-mapped input stays mapped): compact
        # indices, centred values
        rows_l, cols_l, values = k.layout(r.rows, r.cols, vals, order, r.shape, mu)
        del order
        object.__setattr__(self, "rows", rows_l)
        object.__setattr__(self, "cols", cols_l)
        object.__setattr__(self, "values", values)
        object.__setattr__(self, "row_cuts", row_cuts)
        object.__setattr__(self, "col_cuts", col_cuts)
        object.__setattr__(self, "_ptr", ptr)

    @property
    def counts(self) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """Training ratings per row and per column (float arrays of lengths ``shape``)."""
        n_rows, n_cols = self.shape
        return (
            np.bincount(self.rows, minlength=n_rows).astype(np.float64),
            np.bincount(self.cols, minlength=n_cols).astype(np.float64),
        )

    def _require_uniform(self, solver: str) -> None:
        """Raise for a count-weighted ridge in solvers that only implement the uniform one."""
        if self.l2_weighting != "uniform":
            raise InvalidParameterError(
                f"l2_weighting='{self.l2_weighting}' is implemented by the 'als' solver only; "
                f"{solver} supports l2_weighting='uniform'"
            )

    @property
    def _reg_U(self) -> NDArray[np.float64]:
        """Per-column ridge weights of the working row factors ``[U | p | 1]`` (biased model)."""
        reg = np.full(self.width, self.l2)
        if self.bias:
            reg[self.rank], reg[self.rank + 1] = self.l2_bias, 0.0
        return reg

    @property
    def _reg_V(self) -> NDArray[np.float64]:
        """Per-column ridge weights of the working column factors ``[V | 1 | q]`` (biased model)."""
        reg = np.full(self.width, self.l2)
        if self.bias:
            reg[self.rank], reg[self.rank + 1] = 0.0, self.l2_bias
        return reg

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
        bias: bool = False,
        l2_bias: float | None = None,
        offset: float | None = None,
        clip: tuple[float, float] | None = None,
        l2_weighting: Literal["uniform", "count"] = "uniform",
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
        return cls(
            ratings, rank, l2=l2, scaling=scaling, allow_empty=allow_empty, grid=grid, bias=bias,
            l2_bias=l2_bias, offset=offset, clip=clip, l2_weighting=l2_weighting,
        )  # fmt: skip

    @classmethod
    def from_als_lambda(
        cls,
        ratings: Ratings,
        rank: int,
        lam: float,
        *,
        lam_bias: float | None = None,
        scaling: Literal["mean", "sum"] = "mean",
        **kwargs: Any,
    ) -> MatrixFactorizationProblem:
        """The problem whose ridge weights are given on the ALS scale ``Σ r² + λ (‖U‖² + ‖V‖²)``.

        Sets ``l2 = w · lam`` and ``l2_bias = w · lam_bias`` (``w = 1/|Ω|`` for mean scaling);
        other keywords as in the constructor.
        """
        lam = check_nonneg(lam, "lam")
        w = 1.0 / ratings.n_ratings if scaling == "mean" and ratings.n_ratings else 2.0
        lb = None if lam_bias is None else w * check_nonneg(lam_bias, "lam_bias")
        return cls(ratings, rank, l2=w * lam, l2_bias=lb, scaling=scaling, **kwargs)

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
    def width(self) -> int:
        """Columns of the working factors: ``rank + 2`` with biases, ``rank`` without."""
        return self.rank + 2 if self.bias else self.rank

    @property
    def n_params(self) -> int:
        """Length of the flat parameter vector ``(n_rows + n_cols) * width``."""
        return (self.shape[0] + self.shape[1]) * self.width

    @property
    def weight(self) -> float:
        """``w`` in the objective: ``1/|Ω|`` (mean scaling) or ``2`` (sum scaling)."""
        return 1.0 / self.n_ratings if self.scaling == "mean" else 2.0

    def unpack(self, x: NDArray[np.float64]) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """Views ``(U, V)`` of the working factors into the flat vector ``x`` (no copy)."""
        n_rows, n_cols = self.shape
        if x.shape != (self.n_params,):
            raise InvalidParameterError(f"x: expected shape ({self.n_params},), got {x.shape}")
        cut = n_rows * self.width
        return x[:cut].reshape(n_rows, self.width), x[cut:].reshape(n_cols, self.width)

    def pack(self, U: Any, V: Any) -> NDArray[np.float64]:
        """Flat vector ``[U.ravel(), V.ravel()]`` of the working factors (a new array), after checking shapes.

        With biases, plain ``rank``-column factors are accepted too (biases zero).
        """
        U_, V_ = self._check_factors(U, V)
        return np.concatenate([U_.ravel(), V_.ravel()])

    def augment(
        self, U: Any, V: Any, row_bias: Any = None, col_bias: Any = None
    ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """Working factors ``[U | p | 1]`` and ``[V | 1 | q]`` from plain factors and biases (zero if ``None``).

        Without biases, returns the checked ``(U, V)`` and refuses non-``None`` biases.
        """
        U_ = np.ascontiguousarray(as_float_array(U, "U", finite=False))
        V_ = np.ascontiguousarray(as_float_array(V, "V", finite=False))
        n_rows, n_cols = self.shape
        if U_.shape != (n_rows, self.rank) or V_.shape != (n_cols, self.rank):
            raise InvalidParameterError(
                f"U, V: expected shapes ({n_rows}, {self.rank}) and ({n_cols}, {self.rank}), "
                f"got {U_.shape} and {V_.shape}"
            )
        if not self.bias:
            if row_bias is not None or col_bias is not None:
                raise InvalidParameterError("row_bias, col_bias: this problem has no biases (bias=False)")
            return U_, V_
        p = np.zeros(n_rows) if row_bias is None else as_float_array(row_bias, "row_bias", ndim=1)
        q = np.zeros(n_cols) if col_bias is None else as_float_array(col_bias, "col_bias", ndim=1)
        if p.shape != (n_rows,) or q.shape != (n_cols,):
            raise InvalidParameterError(
                f"row_bias, col_bias: expected lengths {n_rows} and {n_cols}, got {p.shape} and {q.shape}"
            )
        Uw = np.empty((n_rows, self.width))
        Vw = np.empty((n_cols, self.width))
        Uw[:, : self.rank], Uw[:, self.rank], Uw[:, self.rank + 1] = U_, p, 1.0
        Vw[:, : self.rank], Vw[:, self.rank], Vw[:, self.rank + 1] = V_, 1.0, q
        return Uw, Vw

    def split(
        self, U: Any, V: Any
    ) -> tuple[
        NDArray[np.float64], NDArray[np.float64], NDArray[np.float64] | None, NDArray[np.float64] | None
    ]:
        """``(U, V, row_bias, col_bias)`` (copies) from working factors; biases ``None`` without ``bias``."""
        U_, V_ = self._check_factors(U, V)
        L = self.rank
        if not self.bias:
            return U_.copy(), V_.copy(), None, None
        return U_[:, :L].copy(), V_[:, :L].copy(), U_[:, L].copy(), V_[:, L + 1].copy()

    def default_init_scale(self) -> float:
        """Standard deviation of the data-scaled initialization (:meth:`init_factors` with ``scale=None``).

        ``(c · m2 / rank)^(1/4)`` with ``m2`` the mean square of the ratings minus ``offset``: the
        initial products ``U_a·V_b`` have a root-mean-square of ``√c`` times the ratings'.  ``c = 0.01``
        when the ratings are centred (their mean is small next to their spread, as with
        ``bias=True``): small enough not to start far off (the seed's ``N(0, 1)`` gives products
        of standard deviation ``√rank``) and large enough to leave the saddle point at zero
        quickly.  ``c = 1`` for uncentred ratings, whose level the factors themselves must carry
        (a small start there stalls near zero; fit ``bias=True`` instead).
        """
        v = self.values
        n = max(v.shape[0], 1)
        m2 = float(np.dot(v, v)) / n
        mean = float(v.sum()) / n
        c = 0.01 if mean * mean <= 0.1 * m2 else 1.0
        return float((c * max(m2, 1e-12) / self.rank) ** 0.25)

    def init_factors(
        self, *, rng: RNGLike, scale: float | Literal["spectral"] | None = 1.0
    ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """Random working factors: i.i.d. ``N(0, scale²)`` factor entries, zero biases.

        ``scale = 1`` is the reference code's; ``None`` uses :meth:`default_init_scale`;
        ``"spectral"`` starts from :meth:`spectral_factors` (plus ``N(0, (0.05 s)²)`` entries, ``s``
        the default scale, so that no direction starts at the saddle point ``0``).
        """
        spectral = isinstance(scale, str)
        if spectral and scale != "spectral":
            raise InvalidParameterError("scale: expected a positive number, None or 'spectral'")
        if spectral or scale is None:
            s = self.default_init_scale() * (0.05 if spectral else 1.0)
        else:
            s = check_positive(scale, "scale")
        gen = as_generator(rng)
        n_rows, n_cols = self.shape
        check_memory(
            8.0 * (n_rows + n_cols) * self.width * 2,
            f"rank={self.rank}: the factors of a {n_rows} x {n_cols} matrix",
            fix="use a smaller rank",
        )
        U = s * gen.standard_normal((n_rows, self.rank))
        V = s * gen.standard_normal((n_cols, self.rank))
        if spectral:
            U0, V0 = self.spectral_factors(rng=gen)
            U += U0
            V += V0
        if not self.bias:
            return U, V
        return self.augment(U, V)

    def spectral_factors(
        self, *, rng: RNGLike, n_power: int = 2
    ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """Plain factors from the top singular subspace of the (offset-subtracted) rating matrix.

        ``A`` is the sparse ``n_rows x n_cols`` matrix of the ratings minus ``offset`` (zeros where
        unobserved), ``p = |Ω| / (n_rows n_cols)`` its density.  A randomized subspace iteration
        (``rank + 5`` random directions from ``rng``, ``n_power`` power steps) gives ``A ≈ Q S Pᵀ``;
        the factors are ``U = Q D``, ``V = P D`` with ``D² = max(S - λ_ALS, 0) / p``: the ridge
        solution of the fully observed problem (singular values soft-thresholded by
        ``λ_ALS = l2 / w``), rescaled from the observed to the full matrix.  Starting here skips
        the slow escape from the saddle point at zero of a small random start on large data
        (``docs/mf_peers.md``).  Costs ``2 n_power + 3`` sparse products with ``rank + 5`` vectors.
        """
        import scipy.sparse as sp

        n_power = check_int(n_power, "n_power", minimum=0)
        gen = as_generator(rng)
        n_rows, n_cols = self.shape
        A = sp.csr_matrix((self.values, (self.rows, self.cols)), shape=(n_rows, n_cols))
        k = min(self.rank + 5, n_rows, n_cols)
        Y = A @ gen.standard_normal((n_cols, k))
        for _ in range(n_power):
            Q, _ = np.linalg.qr(Y)
            Y = A @ (A.T @ Q)
        Q, _ = np.linalg.qr(Y)
        Ub, sv, Pt = np.linalg.svd(np.asarray((A.T @ Q).T), full_matrices=False)
        L = min(self.rank, sv.shape[0])
        density = self.n_ratings / (float(n_rows) * n_cols)
        d = np.sqrt(np.maximum(sv[:L] - self.l2 / self.weight, 0.0) / density)
        U = np.zeros((n_rows, self.rank))
        V = np.zeros((n_cols, self.rank))
        U[:, :L] = (Q @ Ub[:, :L]) * d
        V[:, :L] = Pt[:L].T * d
        return U, V

    def _check_factors(self, U: Any, V: Any) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        U_ = np.ascontiguousarray(as_float_array(U, "U", finite=False))
        V_ = np.ascontiguousarray(as_float_array(V, "V", finite=False))
        n_rows, n_cols = self.shape
        if self.bias and U_.shape == (n_rows, self.rank) and V_.shape == (n_cols, self.rank):
            return self.augment(U_, V_)
        if U_.shape != (n_rows, self.width) or V_.shape != (n_cols, self.width):
            extra = " (or the working factors with rank + 2 columns)" if self.bias else ""
            raise InvalidParameterError(
                f"U, V: expected shapes ({n_rows}, {self.rank}) and ({n_cols}, {self.rank}){extra}, "
                f"got {U_.shape} and {V_.shape}"
            )
        return U_, V_

    # ------------------------------------------------------------------ evaluation
    def _layout_of(
        self, ratings: Ratings
    ) -> tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.float64], NDArray[np.int64]]:
        if not isinstance(ratings, Ratings) or ratings.shape != self.shape:
            raise InvalidParameterError(
                f"ratings: expected a Ratings of shape {self.shape} (same users and items)"
            )
        it = _kernels().index_dtype(self.shape)
        rows = np.ascontiguousarray(ratings.rows, dtype=it)
        cols = np.ascontiguousarray(ratings.cols, dtype=it)
        vals = np.ascontiguousarray(ratings.values, dtype=np.float64)
        if self.offset:
            vals = vals - self.offset
        ptr = np.linspace(0, rows.shape[0], _N_CHUNKS + 1).round().astype(np.int64)
        return rows, cols, vals, ptr

    def evaluator(self, ratings: Ratings) -> Any:
        """A function ``(U, V) -> RMSE`` over ``ratings`` (working factors; clipped if ``clip``).

        Converts and centres the ratings once, for repeated evaluation (held-out RMSE every epoch).
        """
        rows, cols, vals, ptr = self._layout_of(ratings)
        n = rows.shape[0]
        if n == 0:
            raise InvalidParameterError("ratings: contains no ratings")
        k = _kernels()
        out = np.zeros(ptr.shape[0] - 1)
        clip = self.clip
        mu = float(self.offset or 0.0)

        def rmse(U: NDArray[np.float64], V: NDArray[np.float64]) -> float:
            if clip is None:
                k.sse_chunks(U, V, rows, cols, vals, ptr, out)
            else:
                k.sse_chunks_clipped(U, V, rows, cols, vals, ptr, clip[0] - mu, clip[1] - mu, out)
            return math.sqrt(float(out.sum()) / n)

        return rmse

    def sse(self, U: Any, V: Any, ratings: Ratings | None = None) -> float:
        """Sum of squared residuals over ``ratings`` (default: the training ratings; unclipped)."""
        U_, V_ = self._check_factors(U, V)
        k = _kernels()
        if ratings is None:
            rows, cols, vals, ptr = self.rows, self.cols, self.values, self._ptr
        else:
            rows, cols, vals, ptr = self._layout_of(ratings)
        out = np.zeros(ptr.shape[0] - 1)
        k.sse_chunks(U_, V_, rows, cols, vals, ptr, out)
        return float(out.sum())

    def rmse(self, U: Any, V: Any, ratings: Ratings | None = None) -> float:
        """Root-mean-square error over ``ratings`` (default: training RMSE, as in the thesis).

        Held-out ratings use clipped predictions when ``clip`` is set.
        """
        n = self.n_ratings if ratings is None else ratings.n_ratings
        if n == 0:
            raise InvalidParameterError("ratings: contains no ratings")
        if ratings is not None and self.clip is not None:
            U_, V_ = self._check_factors(U, V)
            return float(self.evaluator(ratings)(U_, V_))
        return math.sqrt(self.sse(U, V, ratings) / n)

    def predict(self, U: Any, V: Any, rows: Any, cols: Any) -> NDArray[np.float64]:
        """Predictions ``μ + p_a + q_b + U_a·V_b`` for index pairs (clipped if ``clip``)."""
        U_, V_ = self._check_factors(U, V)
        rr = _check_index_array(rows, "rows")
        cc = _check_index_array(cols, "cols")
        if rr.shape != cc.shape:
            raise InvalidParameterError("rows, cols: expected arrays of the same length")
        n_rows, n_cols = self.shape
        if rr.size and (rr.min() < 0 or rr.max() >= n_rows or cc.min() < 0 or cc.max() >= n_cols):
            raise InvalidParameterError(f"rows, cols: indices must lie inside shape {self.shape}")
        out = np.empty(rr.shape[0])
        _kernels().predict_into(U_, V_, rr, cc, out)
        out += self.offset or 0.0
        if self.clip is not None:
            np.clip(out, self.clip[0], self.clip[1], out=out)
        return out

    def regularize(
        self, gU: NDArray[np.float64], gV: NDArray[np.float64], U: Any, V: Any, share: float = 1.0
    ) -> None:
        """Add ``share`` times the ridge gradient to ``(gU, gV)`` in place (zeroing the fixed columns)."""
        k = _kernels()
        if self.l2_weighting == "count":
            nr, nc = self.counts
            gU += share * (nr[:, None] * self._reg_U[None, :]) * U
            gV += share * (nc[:, None] * self._reg_V[None, :]) * V
            if self.bias:
                gU[:, self.rank + 1] = 0.0
                gV[:, self.rank] = 0.0
            return
        if self.bias:
            L = self.rank
            k.regularize(gU, U, share * self._reg_U, L + 1)
            k.regularize(gV, V, share * self._reg_V, L)
        elif self.l2:
            gU += share * self.l2 * U
            gV += share * self.l2 * V

    def loss(self, U: Any, V: Any) -> float:
        """Objective value ``f`` (see the module docstring)."""
        U_, V_ = self._check_factors(U, V)
        return 0.5 * self.weight * self.sse(U_, V_) + self.ridge(U_, V_)

    def ridge(self, U: Any, V: Any) -> float:
        """The ridge part of the objective, ``(λ/2)(‖U‖² + ‖V‖²) + (λ_b/2)(‖p‖² + ‖q‖²)``."""
        U_, V_ = self._check_factors(U, V)
        if self.l2_weighting == "count":
            nr, nc = self.counts
            return 0.5 * float(
                np.einsum("i,ij,ij,j->", nr, U_, U_, self._reg_U)
                + np.einsum("i,ij,ij,j->", nc, V_, V_, self._reg_V)
            )
        if self.bias:
            return 0.5 * float(
                np.einsum("ij,ij,j->", U_, U_, self._reg_U) + np.einsum("ij,ij,j->", V_, V_, self._reg_V)
            )
        if self.l2:
            return 0.5 * self.l2 * (float(np.vdot(U_, U_)) + float(np.vdot(V_, V_)))
        return 0.0

    def gradient(
        self, U: Any, V: Any, *, n_threads: int = 1
    ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """Full gradient ``(∂f/∂U, ∂f/∂V)`` of the working factors (compiled; strata in sequence,
        blocks on ``n_threads`` threads).

        The result is bit-for-bit the same for every ``n_threads``.  The columns of ones of the
        biased model get a zero gradient.
        """
        U_, V_ = self._check_factors(U, V)
        check_int(n_threads, "n_threads")
        k = _kernels()
        gU = np.zeros_like(U_)
        gV = np.zeros_like(V_)
        sse = np.zeros(self._ptr.shape[0] - 1)
        with k.BlockRunner(n_threads) as run:
            run(U_, V_, self.rows, self.cols, self.values, self._ptr, self.grid, self.weight, gU, gV, sse)
        self.regularize(gU, gV, U_, V_)
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
