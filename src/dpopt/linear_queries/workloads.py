"""Workloads of linear counting queries, described without data.

A workload is an ``m x n`` matrix ``W`` whose rows are linear queries on a histogram ``x`` of
length ``n`` (one count per domain cell).  The strategy optimizer only needs the Gram matrix
``V = WᵀW`` (``n x n``), so every workload knows ``V`` -- in closed form when one exists, without
forming ``W`` -- together with its shape, its sensitivities and how to evaluate ``W x``.

Constructors
------------
* :func:`identity`, :func:`total`, :func:`prefix`, :func:`all_range` -- closed forms.
* :func:`ranges` (explicit intervals), :func:`random_ranges` (WRange of the COA paper).
* :func:`random_bernoulli` (WDiscrete), :func:`random_marginals` (WMarginal, 2-way marginals on the
  bits of the cell index), :func:`random_related` (WRelated, rank-``s`` product ``C B``).
* :func:`from_matrix` -- a user's dense array or ``scipy.sparse`` matrix.
* :func:`kronecker` -- products of per-attribute workloads on multi-dimensional domains;
  :class:`Union` stacks workloads, :func:`marginals` gives all k-way marginals of a domain.

Random generators take a keyword ``rng`` (int seed, ``numpy.random.Generator`` or None) and record
their parameters in :attr:`Workload.params`.
"""

from __future__ import annotations

import abc
import hashlib
import math
import zipfile
from collections.abc import Sequence
from typing import Any

import numpy as np
import scipy.sparse as sp
from numpy.typing import ArrayLike, NDArray

from dpopt._validation import as_float_array, check_int, check_probability, parse_numeric_table
from dpopt.exceptions import Hint, InvalidParameterError, Setting
from dpopt.randomness import RNGLike, as_generator

__all__ = [
    "AllRange",
    "Identity",
    "Kronecker",
    "LowRank",
    "Marginals",
    "MatrixWorkload",
    "Prefix",
    "Ranges",
    "Total",
    "Union",
    "Workload",
    "all_range",
    "from_matrix",
    "from_spec",
    "identity",
    "kron_apply",
    "kronecker",
    "load",
    "marginals",
    "prefix",
    "random_bernoulli",
    "random_marginals",
    "random_ranges",
    "random_related",
    "ranges",
    "total",
]

FloatArray = NDArray[np.float64]


class Workload(abc.ABC):
    """Base class: an implicit ``m x n`` workload matrix ``W``.

    Subclasses implement :meth:`_gram`, :meth:`_matvec` and :meth:`_column_abs_sums`; dense
    :meth:`matrix` is optional (it defaults to ``W @ I``, column by column).

    Attributes
    ----------
    name : str
        Short name (``"prefix"``, ``"WRange"``, ...).
    params : dict
        Generator parameters (for records and fingerprints).
    """

    name: str = "workload"

    def __init__(self, m: int, n: int, *, name: str | None = None, params: dict[str, Any] | None = None):
        self._m = check_int(m, "m")
        self._n = check_int(n, "n")
        if name is not None:
            self.name = name
        self.params: dict[str, Any] = dict(params or {})
        self._gram_cache: FloatArray | None = None
        self._fingerprint: str | None = None

    # ------------------------------------------------------------------ to implement
    @abc.abstractmethod
    def _gram(self) -> FloatArray:
        """``WᵀW`` as a new array (:meth:`gram` symmetrizes it in place)."""

    @abc.abstractmethod
    def _matvec(self, x: FloatArray) -> FloatArray: ...

    @abc.abstractmethod
    def _column_abs_sums(self) -> FloatArray: ...

    # ------------------------------------------------------------------ public interface
    @property
    def shape(self) -> tuple[int, int]:
        """``(m, n)``: number of queries and domain size."""
        return (self._m, self._n)

    @property
    def n_queries(self) -> int:
        """Number of queries m."""
        return self._m

    @property
    def domain_size(self) -> int:
        """Number of histogram cells n."""
        return self._n

    def gram(self) -> FloatArray:
        """``V = WᵀW`` as a dense ``(n, n)`` array (computed once, read-only)."""
        if self._gram_cache is None:
            V = np.ascontiguousarray(self._gram(), dtype=np.float64)  # _gram returns a fresh array
            if not (V.flags.owndata and V.flags.writeable):
                V = V.copy()
            V += V.T  # numpy buffers the overlapping operand: equal to (V + V.T) / 2, one copy less
            V *= 0.5
            V.setflags(write=False)
            self._gram_cache = V
        return self._gram_cache

    def answer(self, x: ArrayLike) -> FloatArray:
        """True answers ``W x`` for a histogram (or estimate) ``x`` of length n."""
        arr = as_float_array(x, "x", finite=False)
        if arr.shape != (self._n,):
            raise InvalidParameterError(
                f"x: expected a vector of length {self._n} (the workload's domain size), got shape {arr.shape}"
            )
        return np.asarray(self._matvec(arr), dtype=np.float64)

    def matrix(self) -> FloatArray:
        """Dense ``W`` (m x n).  May be large: check :attr:`shape` first."""
        cols = [self._matvec(e) for e in np.eye(self._n)]
        return np.column_stack(cols) if cols else np.zeros((self._m, 0))

    @property
    def frobenius_norm_sq(self) -> float:
        """``‖W‖_F² = tr(V)``."""
        return float(np.trace(self.gram()))

    def column_norms(self) -> FloatArray:
        """l2 norm of every column of W (``sqrt(diag V)``)."""
        return np.sqrt(np.clip(np.diag(self.gram()), 0.0, None))

    @property
    def l2_sensitivity(self) -> float:
        """Largest column l2 norm ``‖W‖_{2,inf}``: add/remove l2 sensitivity of ``x -> W x``."""
        return float(self.column_norms().max())

    @property
    def l1_sensitivity(self) -> float:
        """Largest column l1 norm ``‖W‖_{1,inf}``: add/remove l1 sensitivity of ``x -> W x``."""
        return float(np.max(self._column_abs_sums()))

    def zero_columns(self) -> NDArray[np.intp]:
        """Indices of cells no query touches (zero columns of W)."""
        return np.flatnonzero(np.diag(self.gram()) <= 0)

    def fingerprint(self) -> str:
        """SHA-256 of the name, shape and Gram matrix: identifies the workload for strategy caching."""
        if self._fingerprint is None:
            h = hashlib.sha256()
            h.update(f"{self._m}x{self._n}".encode())
            rows = getattr(self, "_gram_rows", None)
            if self._gram_cache is None and rows is not None:
                # closed-form Gram: hash the same bytes block by block, never holding n x n
                for lo in range(0, self._n, 256):
                    h.update(np.ascontiguousarray(rows(lo, min(lo + 256, self._n))).tobytes())
            else:
                h.update(np.ascontiguousarray(self.gram()).tobytes())
            self._fingerprint = h.hexdigest()
        return self._fingerprint

    def describe(self) -> dict[str, Any]:
        """Name, shape and parameters as a flat dict (for records)."""
        return {"workload": self.name, "m": self._m, "n": self._n, **self.params}

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, m={self._m}, n={self._n})"


# ------------------------------------------------------------------------------- closed forms
class Identity(Workload):
    """``W = I_n``: every cell count once."""

    name = "identity"

    def __init__(self, n: int):
        super().__init__(n, n)

    def _gram(self) -> FloatArray:
        return np.eye(self._n)

    def _matvec(self, x: FloatArray) -> FloatArray:
        return x.copy()

    def _column_abs_sums(self) -> FloatArray:
        return np.ones(self._n)


class Total(Workload):
    """One query: the total count (``W = 1ᵀ``)."""

    name = "total"

    def __init__(self, n: int):
        super().__init__(1, n)

    def _gram(self) -> FloatArray:
        return np.ones((self._n, self._n))

    def _matvec(self, x: FloatArray) -> FloatArray:
        return np.array([x.sum()])

    def _column_abs_sums(self) -> FloatArray:
        return np.ones(self._n)


class Prefix(Workload):
    """All n prefix sums ``x_0 + ... + x_i``; ``V_jk = n - max(j, k)``."""

    name = "prefix"

    def __init__(self, n: int):
        super().__init__(n, n)

    def _gram(self) -> FloatArray:
        return self._gram_rows(0, self._n)

    def _gram_rows(self, lo: int, hi: int) -> FloatArray:
        """Rows ``lo:hi`` of V (exactly symmetric, so equal to those of :meth:`gram`)."""
        i = np.arange(self._n)
        return (self._n - np.maximum.outer(i[lo:hi], i)).astype(np.float64)

    def _matvec(self, x: FloatArray) -> FloatArray:
        return np.cumsum(x)

    def _column_abs_sums(self) -> FloatArray:
        return (self._n - np.arange(self._n)).astype(np.float64)

    def matrix(self) -> FloatArray:
        return np.tril(np.ones((self._n, self._n)))


class AllRange(Workload):
    """All ``n(n+1)/2`` ranges ``[a, b]``, rows ordered by (a, b); ``V_jk = (min(j,k)+1)(n-max(j,k))``."""

    name = "all_range"

    def __init__(self, n: int):
        n = check_int(n, "n")
        super().__init__(n * (n + 1) // 2, n)

    def _gram(self) -> FloatArray:
        return self._gram_rows(0, self._n)

    def _gram_rows(self, lo: int, hi: int) -> FloatArray:
        """Rows ``lo:hi`` of V (exactly symmetric, so equal to those of :meth:`gram`)."""
        i, r = np.arange(self._n), np.arange(lo, hi)
        return ((np.minimum.outer(r, i) + 1) * (self._n - np.maximum.outer(r, i))).astype(np.float64)

    def _matvec(self, x: FloatArray) -> FloatArray:
        c = np.concatenate([[0.0], np.cumsum(x)])
        a, b = np.triu_indices(self._n)
        return c[b + 1] - c[a]

    def _column_abs_sums(self) -> FloatArray:
        j = np.arange(self._n)
        return ((j + 1) * (self._n - j)).astype(np.float64)


class Ranges(Workload):
    """Explicit interval queries ``[lo_k, hi_k]`` (inclusive) on a domain of size n."""

    name = "ranges"

    def __init__(
        self,
        lo: ArrayLike,
        hi: ArrayLike,
        n: int,
        *,
        name: str | None = None,
        params: dict[str, Any] | None = None,
    ):
        lo_a = np.asarray(lo)
        hi_a = np.asarray(hi)
        if lo_a.ndim != 1 or lo_a.shape != hi_a.shape or lo_a.size == 0:
            raise InvalidParameterError(
                "lo, hi: expected two non-empty 1-d integer arrays of the same length"
            )
        if lo_a.dtype.kind not in "iu" or hi_a.dtype.kind not in "iu":
            raise InvalidParameterError("lo, hi: interval endpoints must be integers")
        n = check_int(n, "n")
        if np.any(lo_a < 0) or np.any(hi_a >= n) or np.any(lo_a > hi_a):
            raise InvalidParameterError(f"lo, hi: need 0 <= lo <= hi < n = {n} for every interval")
        super().__init__(lo_a.size, n, name=name, params=params)
        self.lo = lo_a.astype(np.intp)
        self.hi = hi_a.astype(np.intp)

    def _gram(self) -> FloatArray:
        # V_jk = #{intervals with lo <= min(j,k) and hi >= max(j,k)}, via a 2-d cumulative count.
        # (one n x n array: 512 MiB at n = 8192, where index arrays would need three more)
        n = self._n
        S = np.zeros((n, n))
        np.add.at(S, (self.lo, self.hi), 1.0)
        np.cumsum(S, axis=0, out=S)  # lo <= a
        R = S[:, ::-1]
        np.cumsum(R, axis=1, out=R)  # hi >= b; S[a, b] is V_ab for a <= b
        for r0 in range(0, n, 512):  # mirror the upper triangle block by block
            r1 = min(r0 + 512, n)
            S[r0:r1, :r0] = S[:r0, r0:r1].T
            D = S[r0:r1, r0:r1]
            D[...] = np.triu(D) + np.triu(D, 1).T
        return S

    def _matvec(self, x: FloatArray) -> FloatArray:
        c = np.concatenate([[0.0], np.cumsum(x)])
        return c[self.hi + 1] - c[self.lo]

    def _column_abs_sums(self) -> FloatArray:
        diff = np.zeros(self._n + 1)
        np.add.at(diff, self.lo, 1.0)
        np.add.at(diff, self.hi + 1, -1.0)
        return np.cumsum(diff)[: self._n]

    def matrix(self) -> FloatArray:
        j = np.arange(self._n)
        return ((j[None, :] >= self.lo[:, None]) & (j[None, :] <= self.hi[:, None])).astype(np.float64)


class MatrixWorkload(Workload):
    """A workload given by an explicit dense array or ``scipy.sparse`` matrix."""

    name = "matrix"

    def __init__(
        self,
        W: ArrayLike | sp.spmatrix | sp.sparray,
        *,
        allow_zero_columns: bool = False,
        name: str | None = None,
        params: dict[str, Any] | None = None,
    ):
        if sp.issparse(W):
            Ws = sp.csr_array(W, dtype=np.float64)
            if Ws.ndim != 2:
                raise InvalidParameterError("W: expected a 2-d matrix")
            if not np.all(np.isfinite(Ws.data)):
                raise InvalidParameterError(
                    "W: contains NaN or infinite entries; remove or impute them first"
                )
            self._W: FloatArray | sp.csr_array = Ws
        else:
            Wd = as_float_array(W, "W", ndim=2, finite=False)
            if not np.all(np.isfinite(Wd)):
                raise InvalidParameterError(
                    "W: contains NaN or infinite entries; remove or impute them first"
                )
            self._W = Wd
        m, n = self._W.shape
        if m == 0 or n == 0:
            raise InvalidParameterError("W: must have at least one row and one column")
        super().__init__(m, n, name=name, params=params)
        if not allow_zero_columns:
            zero = self.zero_columns()
            if zero.size:
                raise InvalidParameterError(
                    f"{zero.size} of its {n} columns are all zero (cells no query touches)",
                    param="W",
                    hint=Hint(
                        "drop those cells from the domain, or pass {0} (the optimizer then leaves them unmeasured)",
                        Setting("allow_zero_columns", True),
                    ),
                )

    def _gram(self) -> FloatArray:
        W = self._W
        if sp.issparse(W):
            return np.asarray((W.T @ W).toarray(), dtype=np.float64)  # type: ignore[union-attr]
        return np.asarray(W.T @ W)

    def _matvec(self, x: FloatArray) -> FloatArray:
        return np.asarray(self._W @ x, dtype=np.float64).ravel()

    def _column_abs_sums(self) -> FloatArray:
        W = self._W
        if sp.issparse(W):
            return np.asarray(abs(W).sum(axis=0), dtype=np.float64).ravel()
        return np.abs(W).sum(axis=0)

    def matrix(self) -> FloatArray:
        W = self._W
        if sp.issparse(W):
            return np.asarray(W.toarray(), dtype=np.float64)  # type: ignore[union-attr]
        return np.array(W, dtype=np.float64)


class LowRank(Workload):
    """``W = C B`` with ``C`` (m x s) and ``B`` (s x n): V = Bᵀ(CᵀC)B formed in O(s² n + s n²)."""

    name = "low_rank"

    def __init__(
        self, C: ArrayLike, B: ArrayLike, *, name: str | None = None, params: dict[str, Any] | None = None
    ):
        Ca = as_float_array(C, "C", finite=False)
        Ba = as_float_array(B, "B", finite=False)
        if Ca.ndim != 2 or Ba.ndim != 2 or Ca.shape[1] != Ba.shape[0]:
            raise InvalidParameterError(
                f"C, B: need C of shape (m, s) and B of shape (s, n), got {Ca.shape} and {Ba.shape}"
            )
        if not (np.all(np.isfinite(Ca)) and np.all(np.isfinite(Ba))):
            raise InvalidParameterError("C, B: contain NaN or infinite entries")
        super().__init__(Ca.shape[0], Ba.shape[1], name=name, params=params)
        self.C = Ca
        self.B = Ba

    def _gram(self) -> FloatArray:
        return np.asarray(self.B.T @ ((self.C.T @ self.C) @ self.B))

    def _matvec(self, x: FloatArray) -> FloatArray:
        return np.asarray(self.C @ (self.B @ x))

    def _column_abs_sums(self) -> FloatArray:
        return np.abs(self.matrix()).sum(axis=0)

    def matrix(self) -> FloatArray:
        return np.asarray(self.C @ self.B)


def kron_apply(matrices: Sequence[NDArray[Any]], x: NDArray[Any]) -> FloatArray:
    """``(M_1 ⊗ ... ⊗ M_d) x`` without forming the product (cells in C order)."""
    shape = tuple(M.shape[1] for M in matrices)
    t = np.asarray(x, dtype=np.float64).reshape(shape)
    for k, M in enumerate(matrices):
        t = np.moveaxis(np.tensordot(M, t, axes=(1, k)), 0, k)
    return np.asarray(t.reshape(-1))


class Kronecker(Workload):
    """Product workload ``W = W_1 ⊗ ... ⊗ W_d`` on a d-dimensional domain (cells in C order).

    Every query is a product of one per-attribute query per dimension (e.g. ranges in each
    dimension = rectangles).  The strategy problem separates: :func:`optimize_strategy` solves
    one problem per factor, certifies the product, and keeps the strategy implicit when the
    domain is too large for dense matrices.
    """

    name = "kronecker"
    dense_limit = 1 << 13  # largest n for which gram() / matrix() are formed

    def __init__(self, factors: Sequence[Workload], *, name: str | None = None):
        facs = tuple(factors)
        if not facs or not all(isinstance(f, Workload) for f in facs):
            raise InvalidParameterError("factors: expected a non-empty sequence of Workload objects")
        m = int(np.prod([f.n_queries for f in facs], dtype=object))
        n = int(np.prod([f.domain_size for f in facs], dtype=object))
        super().__init__(m, n, name=name, params={"factors": [f.name for f in facs]})
        self.factors = facs

    def _too_large(self, what: str) -> None:
        if self._n > self.dense_limit:
            raise InvalidParameterError(
                f"{what}: the product domain has n={self._n} cells, too many for a dense n×n matrix "
                f"(limit {self.dense_limit}); work with .factors instead"
            )

    def _gram(self) -> FloatArray:
        self._too_large("gram")
        out: FloatArray = np.ones((1, 1))
        for f in self.factors:
            out = np.asarray(np.kron(out, f.gram()), dtype=np.float64)
        return out

    def matrix(self) -> FloatArray:
        self._too_large("matrix")
        out: FloatArray = np.ones((1, 1))
        for f in self.factors:
            out = np.asarray(np.kron(out, f.matrix()), dtype=np.float64)
        return out

    def _matvec(self, x: FloatArray) -> FloatArray:
        return kron_apply([f.matrix() for f in self.factors], x)

    def _column_abs_sums(self) -> FloatArray:
        out: FloatArray = np.ones(1)
        for f in self.factors:
            out = np.asarray(np.kron(out, f._column_abs_sums()), dtype=np.float64)
        return out

    def column_norms(self) -> FloatArray:
        out: FloatArray = np.ones(1)
        for f in self.factors:
            out = np.asarray(np.kron(out, f.column_norms()), dtype=np.float64)
        return out

    @property
    def l2_sensitivity(self) -> float:
        return float(np.prod([f.l2_sensitivity for f in self.factors]))

    @property
    def frobenius_norm_sq(self) -> float:
        return float(np.prod([f.frobenius_norm_sq for f in self.factors]))

    def zero_columns(self) -> NDArray[np.intp]:
        return np.flatnonzero(self.column_norms() <= 0)

    def fingerprint(self) -> str:
        if self._fingerprint is None:
            h = hashlib.sha256(b"kronecker")
            for f in self.factors:
                h.update(f.fingerprint().encode())
            self._fingerprint = h.hexdigest()
        return self._fingerprint


class Union(Workload):
    """Stacked workloads on the same domain: ``W = [W_1; W_2; ...]``, ``V = Σ V_k``.

    E.g. all k-way marginals of a multi-dimensional domain (:func:`marginals`) or a union of
    product workloads.  The Gram matrix is dense (n x n).
    """

    name = "union"

    def __init__(
        self, parts: Sequence[Workload], *, name: str | None = None, params: dict[str, Any] | None = None
    ):
        ps = tuple(parts)
        if not ps or not all(isinstance(p, Workload) for p in ps):
            raise InvalidParameterError("parts: expected a non-empty sequence of Workload objects")
        n = ps[0].domain_size
        if any(p.domain_size != n for p in ps):
            raise InvalidParameterError(
                "parts: all stacked workloads must have the same domain size, got "
                + ", ".join(str(p.domain_size) for p in ps)
            )
        super().__init__(sum(p.n_queries for p in ps), n, name=name, params=params)
        self.parts = ps

    def _matvec(self, x: FloatArray) -> FloatArray:
        return np.concatenate([p.answer(x) for p in self.parts])

    def _column_abs_sums(self) -> FloatArray:
        return np.asarray(sum(p._column_abs_sums() for p in self.parts), dtype=np.float64)

    def matrix(self) -> FloatArray:
        return np.vstack([p.matrix() for p in self.parts])

    def _gram(self) -> FloatArray:
        if self._n > Kronecker.dense_limit and all(isinstance(p, Kronecker) for p in self.parts):
            raise InvalidParameterError(
                f"gram: the union's domain has n={self._n} cells, too many for a dense n×n matrix "
                f"(limit {Kronecker.dense_limit}); the optimizer uses the structured residual-basis path"
            )
        out = np.zeros((self._n, self._n))
        for p in self.parts:
            out += p.gram()
        return out

    def fingerprint(self) -> str:
        """Large unions of products are identified by their parts (their Gram matrix is never formed)."""
        if self._fingerprint is None and self._n > Kronecker.dense_limit:
            h = hashlib.sha256(b"union")
            for p in self.parts:
                h.update(p.fingerprint().encode())
            self._fingerprint = h.hexdigest()
        return super().fingerprint()


class Marginals(Union):
    """Marginal queries on a domain with attribute sizes ``shape`` (cells in C order).

    One marginal table per attribute subset S in ``subsets``: the counts summed over the
    attributes outside S (``Π_{i∈S} n_i`` queries; the empty subset is the total).  The Gram
    matrix is diagonal in the residual basis (:meth:`residual_spectrum`), which gives the optimal
    strategy in closed form for any domain size (:func:`~dpopt.linear_queries.optimize_strategy`).
    """

    name = "marginals"

    def __init__(self, shape: Sequence[int], subsets: Sequence[Sequence[int]], *, name: str | None = None):
        dims = tuple(check_int(d, "shape") for d in shape)
        if not dims:
            raise InvalidParameterError("shape: need at least one attribute")
        subs: list[tuple[int, ...]] = []
        seen: set[tuple[int, ...]] = set()
        for sub in subsets:
            t = tuple(sorted({int(i) for i in sub}))
            if any(i < 0 or i >= len(dims) for i in t):
                raise InvalidParameterError(f"subsets: attribute indices must lie in [0, {len(dims)})")
            if t not in seen:
                seen.add(t)
                subs.append(t)
        if not subs:
            raise InvalidParameterError("subsets: need at least one attribute subset")
        # the Kronecker parts are built on first use (the closed form never needs them)
        m = sum(math.prod(dims[i] for i in S) for S in subs)
        Workload.__init__(
            self,
            m,
            math.prod(dims),
            name=name,
            params={"shape": list(dims), "subsets": [list(t) for t in subs]},
        )
        self._parts: tuple[Workload, ...] | None = None
        self.dims = dims
        self.subsets = tuple(subs)

    @property
    def parts(self) -> tuple[Workload, ...]:  # type: ignore[override]
        """One :class:`Kronecker` product (identities on S, totals elsewhere) per subset S."""
        if self._parts is None:
            self._parts = tuple(
                Kronecker([Identity(d) if i in S else Total(d) for i, d in enumerate(self.dims)])
                for S in self.subsets
            )
        return self._parts

    def _dense_check(self, what: str) -> None:
        if self._n > Kronecker.dense_limit:
            raise InvalidParameterError(
                f"{what}: the domain has n={self._n} cells, too many for a dense n×n matrix "
                f"(limit {Kronecker.dense_limit}); the optimizer and the mechanism use the residual basis"
            )

    def _gram(self) -> FloatArray:
        self._dense_check("gram")
        return super()._gram()

    def matrix(self) -> FloatArray:
        self._dense_check("matrix")
        return super().matrix()

    def _matvec(self, x: FloatArray) -> FloatArray:
        t = x.reshape(self.dims)
        tables = [
            np.asarray(t.sum(axis=tuple(i for i in range(len(self.dims)) if i not in S))).reshape(-1)
            for S in self.subsets
        ]
        return np.concatenate(tables)

    def _column_abs_sums(self) -> FloatArray:
        return np.full(self._n, float(len(self.subsets)))

    def column_norms(self) -> FloatArray:
        return np.full(self._n, math.sqrt(len(self.subsets)))

    @property
    def frobenius_norm_sq(self) -> float:
        return float(self._n * len(self.subsets))

    def zero_columns(self) -> NDArray[np.intp]:
        return np.empty(0, dtype=np.intp)

    def fingerprint(self) -> str:
        if self._fingerprint is None:
            self._fingerprint = hashlib.sha256(
                repr(("marginals", self.dims, self.subsets)).encode()
            ).hexdigest()
        return self._fingerprint

    def residual_spectrum(self) -> list[tuple[tuple[int, ...], float, int]]:
        """``(T, λ_T, dim U_T)`` for every residual subspace with λ_T > 0.

        With ``P0 = J/n_i`` and ``P1 = I - J/n_i`` per attribute, ``V = Σ_T λ_T ⊗_{i∈T} P1 ⊗_{i∉T} P0``
        where ``λ_T = Σ_{S ⊇ T} Π_{i∉S} n_i`` and ``dim U_T = Π_{i∈T} (n_i - 1)``.
        """
        import itertools

        N = math.prod(self.dims)
        lam: dict[tuple[int, ...], float] = {}
        for S in self.subsets:  # λ_T = Σ_{S ⊇ T} Π_{i∉S} n_i, accumulated from every S
            w = float(N // math.prod(self.dims[i] for i in S))
            for r in range(len(S) + 1):
                for T in itertools.combinations(S, r):
                    lam[T] = lam.get(T, 0.0) + w
        out = []
        for T, value in lam.items():
            dim = math.prod(self.dims[i] - 1 for i in T)
            if dim:
                out.append((T, value, int(dim)))
        return sorted(out)


def marginals(shape: Sequence[int], k: int = 2) -> Marginals:
    """All k-way marginals of a domain with attribute sizes ``shape`` (cells in C order)."""
    import itertools

    dims = [check_int(d, "shape") for d in shape]
    k = check_int(k, "k", minimum=0)
    if k > len(dims):
        raise InvalidParameterError(f"k: at most the number of attributes ({len(dims)})")
    return Marginals(dims, list(itertools.combinations(range(len(dims)), k)), name=f"{k}-way marginals")


# ------------------------------------------------------------------------------- constructors
def kronecker(*factors: Workload) -> Kronecker:
    """The product workload ``factors[0] ⊗ factors[1] ⊗ ...`` (e.g. ``kronecker(prefix(64), all_range(32))``)."""
    return Kronecker(factors)


def identity(n: int) -> Identity:
    """The identity workload on n cells."""
    return Identity(n)


def total(n: int) -> Total:
    """The single total-count query on n cells."""
    return Total(n)


def prefix(n: int) -> Prefix:
    """All n prefix (cumulative) counts."""
    return Prefix(n)


def all_range(n: int) -> AllRange:
    """All ``n(n+1)/2`` range queries."""
    return AllRange(n)


def ranges(lo: ArrayLike, hi: ArrayLike, n: int) -> Ranges:
    """Interval queries ``[lo_k, hi_k]`` (inclusive endpoints)."""
    return Ranges(lo, hi, n)


def from_matrix(
    W: ArrayLike | sp.spmatrix | sp.sparray, *, allow_zero_columns: bool = False
) -> MatrixWorkload:
    """A workload from a user's dense array or ``scipy.sparse`` matrix (checked: finite, no zero columns)."""
    return MatrixWorkload(W, allow_zero_columns=allow_zero_columns)


def random_ranges(m: int, n: int, *, rng: RNGLike) -> Ranges:
    """WRange [COA]: m intervals, endpoints drawn independently and uniformly from {0..n-1} and sorted.

    Cells that no interval covers are allowed (zero columns; the optimizer leaves them unmeasured).
    """
    m, n = check_int(m, "m"), check_int(n, "n")
    g = as_generator(rng)
    ends = g.integers(0, n, size=(m, 2))
    return Ranges(ends.min(axis=1), ends.max(axis=1), n, name="WRange", params={"generator": "WRange"})


def random_bernoulli(
    m: int, n: int, *, rng: RNGLike, p: float = 0.5, values: tuple[float, float] = (0.0, 1.0)
) -> MatrixWorkload:
    """WDiscrete [COA]: i.i.d. entries, ``values[1]`` with probability p, else ``values[0]``.

    Defaults (p = 0.5, values {0, 1}) are the spec's choice; the paper says only "Bernoulli".
    """
    m, n = check_int(m, "m"), check_int(n, "n")
    prob = check_probability(p, "p", open_left=True)
    g = as_generator(rng)
    on = g.random((m, n)) < prob
    vals = as_float_array(values, "values", ndim=1)
    if vals.shape != (2,):
        raise InvalidParameterError("values: expected a pair (value when off, value when on)")
    W = np.where(on, vals[1], vals[0])
    return MatrixWorkload(
        W, allow_zero_columns=True, name="WDiscrete", params={"generator": "WDiscrete", "p": prob}
    )


def random_marginals(m: int, n: int, *, rng: RNGLike) -> MatrixWorkload:
    """WMarginal [COA, spec A.13]: m two-way marginal queries on the d = log2(n) bits of the cell index.

    Query ``(i < j, a, b)`` counts the cells whose bit i equals a and bit j equals b (n/4 ones per
    row); queries are drawn uniformly with replacement from the ``4·C(d, 2)`` possible ones.
    """
    m, n = check_int(m, "m"), check_int(n, "n", minimum=4)
    d = n.bit_length() - 1
    if 1 << d != n:
        raise InvalidParameterError("n: random_marginals needs a power of two (cells = bit vectors)")
    g = as_generator(rng)
    cells = np.arange(n)
    bits = (cells[:, None] >> np.arange(d)) & 1
    pairs = [(i, j) for i in range(d) for j in range(i + 1, d)]
    q = g.integers(0, 4 * len(pairs), size=m)
    pair_idx, ab = np.divmod(q, 4)
    W = np.empty((m, n))
    for k in range(m):
        i, j = pairs[pair_idx[k]]
        W[k] = (bits[:, i] == ab[k] // 2) & (bits[:, j] == ab[k] % 2)
    return MatrixWorkload(W, allow_zero_columns=True, name="WMarginal", params={"generator": "WMarginal"})


def random_related(m: int, n: int, s: int | None = None, *, rng: RNGLike) -> LowRank:
    """WRelated [COA]: ``W = C B`` with i.i.d. standard normal ``C`` (m x s) and ``B`` (s x n).

    ``s`` defaults to ``round(0.5 min(m, n))`` (spec choice; the paper gives no default).
    """
    m, n = check_int(m, "m"), check_int(n, "n")
    s = max(1, round(0.5 * min(m, n))) if s is None else check_int(s, "s")
    g = as_generator(rng)
    C = g.standard_normal((m, s))
    B = g.standard_normal((s, n))
    return LowRank(C, B, name="WRelated", params={"generator": "WRelated", "s": s})


# --------------------------------------------------------------------------- names and files
_SPEC_MAKERS: dict[str, tuple[tuple[str, ...], Any]] = {
    "identity": (("n",), lambda a, rng: identity(a["n"])),
    "total": (("n",), lambda a, rng: total(a["n"])),
    "prefix": (("n",), lambda a, rng: prefix(a["n"])),
    "all_range": (("n",), lambda a, rng: all_range(a["n"])),
    "ranges": (("m", "n"), lambda a, rng: random_ranges(a["m"], a["n"], rng=rng)),
    "bernoulli": (("m", "n"), lambda a, rng: random_bernoulli(a["m"], a["n"], rng=rng, p=a.get("p", 0.5))),
    "marginals": (("m", "n"), lambda a, rng: random_marginals(a["m"], a["n"], rng=rng)),
    "related": (("m", "n"), lambda a, rng: random_related(a["m"], a["n"], a.get("s"), rng=rng)),
}


_SPEC = "workload spec"
#: Least value of each integer key of a spec (the sizes m, n; the seed).
_SPEC_MINIMUM = {"m": 1, "n": 1, "seed": 0}


def from_spec(spec: str, *, rng: RNGLike = None) -> Workload:
    """A workload from a short text description (for command lines and configs).

    Grammar: ``name:key=value,key=value`` with names ``identity``, ``total``, ``prefix``,
    ``all_range`` (key ``n``) and the random generators ``ranges``, ``bernoulli`` (``p``),
    ``marginals``, ``related`` (``s``) (keys ``m``, ``n``; a ``seed`` key overrides ``rng``).
    Products of workloads are joined by ``*``: ``"prefix:n=64*all_range:n=32"``.
    Examples: ``"prefix:n=1024"``, ``"ranges:m=1024,n=512,seed=0"``.
    """
    if not isinstance(spec, str) or not spec.strip():
        raise InvalidParameterError("expected a non-empty string such as 'prefix:n=1024'", param=_SPEC)
    parts = [p.strip() for p in spec.split("*")]
    if len(parts) > 1:
        return Kronecker([from_spec(p, rng=rng) for p in parts])
    name, _, rest = spec.strip().partition(":")
    name = name.strip().lower().replace("-", "_")
    if name not in _SPEC_MAKERS:
        raise InvalidParameterError(
            f"unknown workload {name!r}; choose one of {sorted(_SPEC_MAKERS)}", param=_SPEC
        )
    args: dict[str, Any] = {}
    for item in filter(None, (t.strip() for t in rest.split(","))):
        key, eq, value = item.partition("=")
        if not eq:
            raise InvalidParameterError(f"expected key=value, got {item!r}", param=_SPEC)
        try:
            args[key.strip()] = float(value) if key.strip() == "p" else int(value)
        except ValueError:
            raise InvalidParameterError(f"bad value for {key.strip()!r}", param=_SPEC) from None
    needed, make = _SPEC_MAKERS[name]
    missing = [k for k in needed if k not in args]
    if missing:
        raise InvalidParameterError(f"{name} needs {', '.join(missing)} (e.g. {name}:n=256)", param=_SPEC)
    for key, least in _SPEC_MINIMUM.items():  # named as the spec names them (prefix:n=0 is about n)
        if key in args and not args[key] >= least:
            raise InvalidParameterError(f"{key}: must be an integer >= {least}", param=_SPEC)
    if "seed" in args:
        rng = args.pop("seed")
    workload: Workload = make(args, rng)
    return workload


def load(path: str | Any, *, allow_zero_columns: bool = False) -> MatrixWorkload:
    """Load a workload matrix from ``.npy`` (dense), ``.npz`` (``scipy.sparse.save_npz`` or an array
    named ``W``), or a delimited text file (``.csv``: comma, other suffixes: whitespace)."""
    from pathlib import Path

    p = Path(path)
    if not p.is_file():
        raise InvalidParameterError(f"workload file not found: {p}")
    suffix = p.suffix.lower()
    W: Any
    if suffix == ".npy":
        try:
            W = np.load(p, allow_pickle=False)
        except (ValueError, OSError, EOFError):
            raise InvalidParameterError(
                f"workload file {p.name}: not a numeric .npy array (object arrays are not loaded)"
            ) from None
    elif suffix == ".npz":
        try:
            W = sp.load_npz(p)
        except (ValueError, KeyError, OSError, EOFError):
            try:
                with np.load(p, allow_pickle=False) as data:
                    if "W" not in data:
                        raise InvalidParameterError(
                            "workload file: an .npz needs a sparse matrix or an array 'W'"
                        ) from None
                    W = np.array(data["W"])
            except InvalidParameterError:
                raise
            except (ValueError, OSError, EOFError, zipfile.BadZipFile):
                raise InvalidParameterError(f"workload file {p.name}: not a readable .npz archive") from None
    else:
        try:
            text = p.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            raise InvalidParameterError(f"workload file {p.name}: is not a text file") from None
        W = parse_numeric_table(text, f"workload file {p.name}", delimiter="," if suffix == ".csv" else None)
    workload = MatrixWorkload(W, allow_zero_columns=allow_zero_columns, name=p.stem)
    return workload
