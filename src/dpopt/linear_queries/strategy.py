"""Strategy optimization for the Gaussian matrix mechanism (COA, seeds 000/001), with certificates.

Problem (COA eq. 9-10).  For a workload with Gram matrix ``V = WᵀW`` find a strategy ``A`` with
unit column norms minimizing ``tr(W A⁺A⁺ᵀWᵀ)``; with ``X = AᵀA``:

    minimize  f(X) = <X⁺, V>   subject to  diag(X) <= 1,  X ⪰ 0,  range(V) ⊆ range(X).

The total expected squared error of the released answers is ``σ² f(X)`` where σ is the noise of a
sensitivity-1 Gaussian release (:mod:`dpopt.linear_queries.mechanism`).

Lagrange dual (spec A.8).  For any ``y > 0`` with ``Y = diag(y)`` and ``M(y) = (Y^½ V Y^½)^½``,

    f(X) >= LB(y) = tr(M(y))² / Σ_i y_i          for every feasible X,

and ``y = c·1`` gives the SVD bound ``‖W‖_*²/n``.  Every :class:`StrategyResult` carries the best
certified lower bound found and the relative gap ``(objective - lower_bound) / lower_bound``.

Methods (``optimize_strategy(..., method=...)``)
------------------------------------------------
``"dual"`` (default)
    Fixed-point iteration on the dual variables, ``y ← y ⊙ diag(X(y))²`` with
    ``X(y) = Y^-½ M(y) Y^-½`` (the minimizer of the Lagrangian), accelerated by Anderson mixing on
    ``log y``.  Every iteration costs one symmetric eigendecomposition (or one thin SVD of an
    ``r x n`` factor when ``rank(V) = r`` is small) and yields a lower bound *and* two feasible
    strategies (``X(y)`` scaled uniformly, or rescaled to unit column norms); it stops when the
    certified gap is below ``tol``.  It starts at ``y = c·1``, i.e. at the normalized square root
    of V.  Works for rank-deficient workloads without a ridge (the strategy then has ``rank(V)``
    rows).
``"paper"``
    COA exactly as Algorithms 1-3 of the paper with the corrected CG (spec A.4-A.6): X0 = I,
    ridge ``V + θ·mean(diag V)·I``, first step steepest descent, 5 CG passes, Armijo β = 0.1,
    σ = 0.25, 30 outer iterations, relative-decrease stopping (constants in :class:`COAParams`;
    ``COAParams.matlab()`` gives the listing's β = 0.5, σ = 1e-4), optional θ-homotopy.
``"newton"``
    The same damped Newton loop, started at the normalized square root of V, with inexact-Newton
    CG (forcing sequence) and stopping on the certified gap.

Structure
---------
* Product workloads (:class:`~dpopt.linear_queries.workloads.Kronecker`) are solved per factor;
  the per-factor certificates multiply, and the strategy stays implicit for large domains.
* Marginal workloads (:class:`~dpopt.linear_queries.workloads.Marginals`) are solved in closed
  form in the residual basis (the optimum attains the SVD bound: certified gap 0), for domains
  far beyond dense n.
* Cells whose workload columns are identical (e.g. the cells between consecutive endpoints of
  interval queries: m random ranges have at most 2m + 1 classes at any n) are merged: with
  ``V = Pᵀ V_k P`` the problem on the k classes has the same optimum (a strategy ``A_k`` is
  used as ``A_k P``, same column norms and error), and a dual point ``y_k`` of the merged
  problem is the dual point ``y_j = y_k / c_k`` of the full one with the same bound, so the
  certificate is unchanged in kind.  When the workload is given explicitly with fewer rows than
  classes, the final certificate is the sum of the singular values of ``W Y^½``
  (:func:`factor_dual_bound`); with ``m <= 0.8 k`` rows the iterations use the m x m
  eigenproblem of ``W Y Wᵀ``, and the second primal candidate is the uniformly scaled one plus
  one measurement of every class with unused column norm (full rank, never worse).
* Prefix and all-range workloads (tridiagonal ``V⁻¹``) are solved in O(n²) per iteration with an
  O(n²) Sturm-count certificate (:func:`tridiagonal_dual_bound`); above n = 2048 the dense Gram
  matrix is never formed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import scipy.linalg as sla
from numpy.typing import ArrayLike, NDArray

from dpopt._validation import as_float_array, check_int, check_nonneg, check_positive
from dpopt.exceptions import ConvergenceWarning, InvalidParameterError
from dpopt.iteration import Callback, IterationInfo, notify, wants_stop
from dpopt.linear_queries.workloads import Kronecker, Marginals, Workload

__all__ = [
    "COAParams",
    "StrategyResult",
    "coa_gradient",
    "coa_hessian_vector",
    "coa_objective",
    "dual_lower_bound",
    "estimate_memory",
    "estimate_seconds_per_iteration",
    "evaluate_strategy",
    "modified_cg",
    "optimize_strategy",
    "residual_projector",
    "strategy_error",
    "svd_lower_bound",
]

FloatArray = NDArray[np.float64]
Method = Literal["dual", "paper", "newton"]

_BYTES_PER_ENTRY = 8
_LOG_Y_RANGE = 30.0  # dual variables span at most e^30 (see _solve_dual)
_CONTROLLER: Any = None
_VERIFY_LIMIT = 2048  # re-evaluate the objective by SVD up to this n
_SMALL_N = 256  # below this size BLAS runs single-threaded
_DENSE_COPIES = 10  # n x n float64 arrays alive at the peak of one iteration
_STRUCTURED_COPIES = 4  # the same on the tridiagonal-inverse path (eigenvectors, two strategies, slack)


# ====================================================================================== results
@dataclass(frozen=True)
class StrategyResult:
    """An optimized (or given) strategy with its certificate.

    Attributes
    ----------
    strategy : ndarray of shape (p, n)
        The strategy matrix ``A``; every column has l2 norm at most 1 (add/remove sensitivity 1).
    objective : float
        ``‖A‖²_{2,inf} · tr(W A⁺A⁺ᵀWᵀ)``: total expected squared error per unit noise variance.
    lower_bound : float
        Certified lower bound on the objective of *every* strategy (max of the dual and SVD bounds).
    dual_bound, svd_bound : float
        The Lagrange-dual bound ``tr(M(y))²/Σy`` at the best ``y`` found, and ``‖W‖_*²/n``.
        When cells with identical workload columns were merged (``params["structure"]``), both
        are computed on the k merged columns: ``svd_bound`` is then ``‖W_k‖_*²/k``, the dual
        bound at ``y_j = 1/c_j`` (``c_j`` cells per class), also a bound for the full problem.
    gap : float
        ``(objective - lower_bound) / lower_bound``: the strategy is certified within this factor.
    method : str
        ``"dual"``, ``"paper"``, ``"newton"`` or the name of a baseline / given strategy.
    status : str
        The shared statuses (:data:`dpopt.iteration.Status`): ``"converged"`` (gap <= tol, or for
        ``"paper"`` its relative-decrease rule: ``params["stopping_rule"]`` says which),
        ``"max_iter"``, ``"max_time"``, ``"failed"`` (a line search found no descent step),
        ``"stopped"`` (the callback asked) or ``"completed"`` (a given strategy, evaluated, not
        optimized).
    n_iter : int
        Outer iterations performed (also :attr:`nit`).
    cpu_seconds, wall_seconds : float
        Time spent optimizing (the workload's Gram matrix excluded).
    history : tuple of dict
        One record per iteration (objective, lower bound, gap and method-specific diagnostics).
    workload_fingerprint : str
        :meth:`Workload.fingerprint` of the workload it was computed for (for caching).
    bias : float
        ``‖W - W A⁺A‖_F² / ‖W‖_F²``: 0 when the workload lies in the strategy's row space (the
        answers are then unbiased and ``objective`` is exact).
    params : dict
        Solver settings.
    factors : tuple of ndarray
        For a product (Kronecker) workload: the per-attribute strategies, ``A = A_1 ⊗ ... ⊗ A_d``.
        ``strategy`` is then the dense product when n <= 4096 and an empty ``(0, n)`` array
        otherwise (the mechanism works with the factors).
    residual_terms, domain_shape : tuple
        For a :class:`~dpopt.linear_queries.workloads.Marginals` workload: ``X = AᵀA = Σ_T x_T Q_T``
        over residual subspaces ``Q_T = ⊗_{i∈T} P1 ⊗_{i∉T} P0`` of the domain ``domain_shape``,
        as ``(T, x_T)`` pairs; ``A = X^½`` is applied implicitly (``strategy`` is an empty
        ``(0, n)`` array; :func:`~dpopt.linear_queries.union.plan_from_result` gives the plan and
        its ``dense_matrix()`` on small domains).
    attribute_bases : tuple of ndarray
        For a union of products optimized by :func:`~dpopt.linear_queries.union.optimize_union`:
        the per-attribute bases ``C_i`` of the residual-basis strategy, whose measured subsets and
        weights are ``residual_terms``; ``term_matrices`` holds each term's matrix on the jointly
        measured attributes ``params["special"]``; ``strategy`` is then empty.
    """

    strategy: FloatArray
    objective: float
    lower_bound: float
    dual_bound: float
    svd_bound: float
    gap: float
    method: str
    status: str
    n_iter: int
    cpu_seconds: float
    wall_seconds: float
    history: tuple[dict[str, Any], ...] = ()
    workload_fingerprint: str = ""
    bias: float = 0.0
    params: dict[str, Any] = field(default_factory=dict)
    factors: tuple[FloatArray, ...] = ()
    residual_terms: tuple[tuple[tuple[int, ...], float], ...] = ()
    domain_shape: tuple[int, ...] = ()
    attribute_bases: tuple[FloatArray, ...] = ()
    term_matrices: tuple[FloatArray, ...] = ()

    def __post_init__(self) -> None:
        # results are frozen: make the arrays read-only too (a strategy must not change after its
        # error and sensitivity were computed)
        for A in (self.strategy, *self.factors, *self.attribute_bases, *self.term_matrices):
            if isinstance(A, np.ndarray) and A.flags.writeable and A.flags.owndata:
                A.setflags(write=False)

    @property
    def shape(self) -> tuple[int, int]:
        """Shape ``(p, n)`` of the strategy matrix."""
        return (int(self.strategy.shape[0]), int(self.strategy.shape[1]))

    @property
    def converged(self) -> bool:
        """True when the optimizer met its tolerance."""
        return self.status == "converged"

    @property
    def nit(self) -> int:
        """Outer iterations performed (the shared name; same as :attr:`n_iter`)."""
        return self.n_iter

    @property
    def success(self) -> bool:
        """True unless the optimizer failed or was stopped before meeting its tolerance."""
        return self.status in ("converged", "completed")

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Save to ``path`` (``.npz``: the strategy plus JSON metadata).  Load with :meth:`load`."""
        p = Path(path)
        if p.suffix != ".npz":
            p = p.with_suffix(".npz")
        skip = ("strategy", "factors", "attribute_bases", "term_matrices")
        meta = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in skip}
        meta["history"] = list(self.history)
        meta["n_factors"] = len(self.factors)
        meta["n_bases"] = len(self.attribute_bases)
        meta["n_terms"] = len(self.term_matrices)
        arrays: dict[str, Any] = {f"factor_{i}": A for i, A in enumerate(self.factors)}
        arrays.update({f"basis_{i}": C for i, C in enumerate(self.attribute_bases)})
        arrays.update({f"term_{i}": C for i, C in enumerate(self.term_matrices)})
        arrays["strategy"] = self.strategy
        arrays["meta"] = np.array(json.dumps(meta, default=float))
        np.savez_compressed(p, **arrays)
        return p

    @classmethod
    def load(cls, path: str | os.PathLike[str], *, workload: Workload | None = None) -> StrategyResult:
        """Load a saved result; with ``workload`` check that it was computed for that workload."""
        with np.load(Path(path), allow_pickle=False) as data:
            strategy = np.array(data["strategy"], dtype=np.float64)
            meta = json.loads(str(data["meta"]))
            k = int(meta.pop("n_factors", 0))
            factors = tuple(np.array(data[f"factor_{i}"], dtype=np.float64) for i in range(k))
            nb = int(meta.pop("n_bases", 0))
            bases = tuple(np.array(data[f"basis_{i}"], dtype=np.float64) for i in range(nb))
            nt = int(meta.pop("n_terms", 0))
            terms = tuple(np.array(data[f"term_{i}"], dtype=np.float64) for i in range(nt))
        meta["history"] = tuple(meta.get("history", ()))
        meta["factors"] = factors
        meta["attribute_bases"] = bases
        meta["term_matrices"] = terms
        meta["residual_terms"] = tuple((tuple(T), float(x)) for T, x in meta.get("residual_terms", ()))
        meta["domain_shape"] = tuple(meta.get("domain_shape", ()))
        result = cls(strategy=strategy, **meta)
        if workload is not None and result.workload_fingerprint != workload.fingerprint():
            raise InvalidParameterError(
                "the saved strategy was optimized for a different workload (fingerprint mismatch); "
                "re-run optimize_strategy for this workload"
            )
        return result


# ====================================================================================== helpers
def _check_workload(workload: Workload | ArrayLike) -> Workload:
    if isinstance(workload, Workload):
        return workload
    from dpopt.linear_queries.workloads import MatrixWorkload

    return MatrixWorkload(workload)


def estimate_memory(n: int) -> int:
    """Bytes the optimizer needs at domain size n (about ten dense ``n x n`` float64 arrays)."""
    n = check_int(n, "n")
    return _DENSE_COPIES * _BYTES_PER_ENTRY * n * n


def _available_memory() -> int | None:
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):  # pragma: no cover - platform dependent
        return None


def _check_memory(n: int, max_memory: float | None, copies: int = _DENSE_COPIES) -> None:
    need = copies * _BYTES_PER_ENTRY * n * n
    limit = _available_memory() if max_memory is None else int(max_memory)
    if limit is not None and need > limit:
        raise InvalidParameterError(
            f"n={n}: optimizing a strategy needs about {need / 2**30:.2f} GiB "
            f"(≈{copies} dense n×n float64 arrays) but only {limit / 2**30:.2f} GiB is "
            "available; reduce n, use a structured workload, or raise max_memory"
        )


def _sym(A: FloatArray) -> FloatArray:
    return (A + A.T) / 2


def _psd_eigh(V: FloatArray) -> tuple[FloatArray, FloatArray]:
    w, Q = sla.eigh(V, driver="evd")
    return np.clip(w, 0.0, None), Q


_EPS = float(np.finfo(np.float64).eps)


def _round_down(x: float, ops: int) -> float:
    """``x >= 0`` lowered by ``ops`` relative roundings (and one more for this product): a float <= the
    exact value of a quantity computed from exact inputs in ``ops`` correctly rounded operations."""
    return x * (1.0 - 2.0 * (ops + 1) * _EPS) if x > 0 else x


def _eig_null_threshold(B: FloatArray) -> float:
    """Rigorous bound on the eigenvalue error of ``eigh`` on ``B`` (n x n, entries rounded once).

    LAPACK's symmetric eigensolvers are backward stable: the computed eigenvalues are the exact
    eigenvalues of ``B + E`` with ``‖E‖₂ <= p(n)·eps·‖B‖₂`` (LAPACK Users' Guide §4.7, ``p(n)`` a
    modest function of n, taken here as n), and by Weyl's inequality every computed eigenvalue is
    within ``‖E‖₂`` of the true one.  Adding ``2 eps ‖B‖_F`` for the rounding of ``B``'s entries and
    bounding ``‖B‖₂ <= ‖B‖_F`` (itself rounded up) gives ``τ = 2 (n + 2) eps ‖B‖_F``.
    """
    n = B.shape[0]
    norm_f = float(np.linalg.norm(B)) * (1.0 + (n * n + 2) * _EPS)
    return 2.0 * (n + 2) * _EPS * norm_f


def _sqrt_trace_lower(lam: FloatArray, tau: float) -> float:
    """Rigorous lower bound on ``Σ sqrt(λ_i)`` from computed eigenvalues ``lam`` with error <= ``tau``.

    Every true eigenvalue is >= ``max(λ̂_i - τ, 0)`` (and >= 0 for a PSD matrix); ``sqrt`` is
    monotone, so the sum of the square roots of these floors is a lower bound.  Null eigenvalues
    below ``τ`` (rounding noise, which clipping at 0 would turn into ``sqrt(noise)`` terms and an
    inflated bound) count as zero.  The subtraction, square roots and the (``math.fsum``, correctly
    rounded) sum are rounded down afterwards.
    """
    floors = np.sqrt(np.clip(np.asarray(lam, dtype=np.float64) - tau, 0.0, None))
    return _round_down(math.fsum(floors.tolist()), 3)


def _certified_bound(B: FloatArray, denominator: float) -> float:
    """``(Σ sqrt λ_i(B))² / denominator`` rounded down, with the null-eigenvalue threshold of ``B``."""
    lam = sla.eigh(B, eigvals_only=True, driver="evd")
    root = _sqrt_trace_lower(lam, _eig_null_threshold(B))
    return _round_down(root * root / denominator, 2)


def svd_lower_bound(V: ArrayLike) -> float:
    """``tr(V^½)²/n = ‖W‖_*²/n``: no strategy with unit column norms does better (Lemma 4).

    Certified in floating point: eigenvalues of ``V`` within the solver's error bound of zero
    count as zero and the rest are lowered by that bound (:func:`_sqrt_trace_lower`), so the
    result is <= the exact value for the Gram matrix ``V`` as given.
    """
    Va = np.asarray(V, dtype=np.float64)
    return _certified_bound(_sym(Va), float(Va.shape[0]))


def dual_lower_bound(V: ArrayLike, y: ArrayLike) -> float:
    """Certified lower bound ``tr((Y^½ V Y^½)^½)² / Σy`` for any ``y >= 0`` (not all zero).

    Rigorous in floating point as :func:`svd_lower_bound` (null-eigenvalue threshold, rounding
    down; ``Σy`` is summed with ``math.fsum`` and rounded up).
    """
    Va = np.asarray(V, dtype=np.float64)
    ya = np.clip(np.asarray(y, dtype=np.float64), 0.0, None)
    if ya.shape != (Va.shape[0],) or not np.all(np.isfinite(ya)) or ya.sum() <= 0:
        raise InvalidParameterError("y: expected a finite non-negative vector of length n, not all zero")
    s = np.sqrt(ya)
    # The bound holds for every dual point, in particular for ŷ = s² (the exact squares of the
    # rounded square roots, ŷ_i <= y_i (1 + eps)²), so Σŷ is bounded above; the entries of
    # s_i V_ij s_j carry two roundings each, covered by the threshold's 2 eps ‖B‖_F term.
    ysum = math.fsum(ya.tolist()) * (1.0 + 4.0 * _EPS)
    return _certified_bound(_sym(s[:, None] * Va * s[None, :]), ysum)


def _singular_sum_lower(G: FloatArray) -> float:
    """Rigorous lower bound on the sum of the singular values of ``G`` (entries rounded once).

    Backward stability of the SVD and Weyl's inequality for singular values bound every computed
    singular value's error by ``p(m, n) eps ‖G‖₂`` (taken as ``2 (m + n + 2) eps ‖G‖_F`` as in
    :func:`_eig_null_threshold`, which also covers the rounding of ``G``'s entries).  Unlike the
    eigenvalues of ``GᵀG``, whose error allowance enters ``tr (GᵀG)^½`` through a square root,
    the allowance here is absolute on each term.
    """
    tau = 2.0 * (sum(G.shape) + 2) * _EPS * float(np.linalg.norm(G)) * (1 + (G.size + 2) * _EPS)
    sig = sla.svd(G, compute_uv=False, lapack_driver="gesdd", check_finite=False)
    return _round_down(math.fsum(np.clip(sig - tau, 0.0, None).tolist()), 3)


def factor_dual_bound(F: ArrayLike, y: ArrayLike) -> float:
    """Certified dual bound ``tr((Y^½ V Y^½)^½)² / Σy`` for ``V = FᵀF`` given the factor F (m x n).

    ``tr((Y^½ FᵀF Y^½)^½)`` is the sum of the singular values of ``F Y^½`` (an ``m x n`` SVD,
    cheap when ``m < n``), certified by :func:`_singular_sum_lower`; ``Σy`` is handled as in
    :func:`dual_lower_bound`.  With F the workload matrix itself the bound is rigorous for the
    exact Gram matrix ``WᵀW``.
    """
    Fa = np.asarray(F, dtype=np.float64)
    ya = np.clip(np.asarray(y, dtype=np.float64), 0.0, None)
    if Fa.ndim != 2 or ya.shape != (Fa.shape[1],) or not np.all(np.isfinite(ya)) or ya.sum() <= 0:
        raise InvalidParameterError("y: expected a finite non-negative vector of length n, not all zero")
    s = np.sqrt(ya)
    root = _singular_sum_lower(Fa * s[None, :])
    ysum = math.fsum((s * s).tolist()) * (1.0 + 4.0 * _EPS)
    return _round_down(root * root / ysum, 2)


def strategy_error(A: ArrayLike, V: ArrayLike, *, rcond: float = 1e-10) -> tuple[float, float]:
    """``(‖A‖²_{2,inf}·<(AᵀA)⁺, V>, bias)`` for a strategy A and workload Gram matrix V.

    ``bias = <V, I - A⁺A> / tr(V)`` is the relative squared norm of the part of W outside the
    row space of A (0 for an unbiased strategy).  Singular values below ``rcond·s_max`` are dropped.
    """
    Aa = np.asarray(A, dtype=np.float64)
    Va = np.asarray(V, dtype=np.float64)
    if Aa.ndim != 2 or Va.shape != (Aa.shape[1], Aa.shape[1]):
        raise InvalidParameterError(
            f"A, V: need A of shape (p, n) and V of shape (n, n), got {Aa.shape}, {Va.shape}"
        )
    _, s, Pt = sla.svd(Aa, full_matrices=False, lapack_driver="gesdd")
    keep = s > rcond * (s[0] if s.size else 0.0)
    s, Pt = s[keep], Pt[keep]
    proj = np.sum((Pt @ Va) * Pt, axis=1)  # diag(P V Pᵀ) through BLAS (einsum does not use it)
    err = float(np.sum(proj / s**2))
    col2 = float(np.max(np.sum(Aa**2, axis=0)))
    trV = float(np.trace(Va))
    bias = max(0.0, (trV - float(proj.sum())) / trV) if trV > 0 else 0.0
    return col2 * err, bias


# ===================================================================== derivatives (spec A.3)
def _chol_inverse(X: FloatArray) -> FloatArray | None:
    """X⁻¹ from a Cholesky factor, or None if X is not (numerically) positive definite."""
    try:
        L = sla.cholesky(X, lower=True, check_finite=False)
    except np.linalg.LinAlgError:
        return None
    if not np.all(np.isfinite(L)):
        return None
    Zi, info = sla.lapack.dpotri(L, lower=1)
    if info != 0:
        return None
    Z = np.tril(Zi) + np.tril(Zi, -1).T
    return np.asarray(Z)


def coa_objective(X: ArrayLike, V: ArrayLike) -> float:
    """``F(X) = <X⁻¹, V>`` (X positive definite)."""
    Z = _chol_inverse(np.asarray(X, dtype=np.float64))
    if Z is None:
        raise InvalidParameterError("X: must be symmetric positive definite")
    return float(np.sum(Z * np.asarray(V, dtype=np.float64)))


def coa_gradient(X: ArrayLike, V: ArrayLike) -> FloatArray:
    """``G(X) = -X⁻¹ V X⁻¹``."""
    Z = _chol_inverse(np.asarray(X, dtype=np.float64))
    if Z is None:
        raise InvalidParameterError("X: must be symmetric positive definite")
    return _sym(-(Z @ np.asarray(V, dtype=np.float64) @ Z))


def _hvp(Z: FloatArray, G: FloatArray, D: FloatArray) -> FloatArray:
    K = Z @ D @ G
    return -(K + K.T)


def coa_hessian_vector(X: ArrayLike, V: ArrayLike, D: ArrayLike) -> FloatArray:
    """Hessian action ``H_X[D] = -Z D G - G D Z`` for symmetric D (Z = X⁻¹, G = G(X))."""
    Xa = np.asarray(X, dtype=np.float64)
    Z = _chol_inverse(Xa)
    if Z is None:
        raise InvalidParameterError("X: must be symmetric positive definite")
    G = _sym(-(Z @ np.asarray(V, dtype=np.float64) @ Z))
    return _hvp(Z, G, _sym(np.asarray(D, dtype=np.float64)))


def _p0(M: FloatArray) -> FloatArray:
    out = M.copy()
    np.fill_diagonal(out, 0.0)
    return out


def modified_cg(
    Z: FloatArray,
    G: FloatArray,
    max_steps: int = 5,
    *,
    tol_abs: float = 1e-10,
    forcing: float | None = None,
) -> tuple[FloatArray, int]:
    """Algorithm 2 (corrected, spec A.4): CG for the Newton direction on zero-diagonal matrices.

    Solves ``P0 H P0 D = -P0 G`` with at most ``max_steps`` passes; stops when ``<R,R> < tol_abs``
    or, with ``forcing = η``, when ``‖R‖ <= η ‖P0 G‖`` (inexact Newton).  Returns ``(D, passes)``.
    """
    R = _p0(-G)
    D = np.zeros_like(G)
    P = R.copy()
    r_old = float(np.sum(R * R))
    r0 = math.sqrt(r_old)
    passes = 0
    for _ in range(max_steps):
        if r_old < tol_abs or (forcing is not None and math.sqrt(r_old) <= forcing * r0):
            break
        passes += 1
        B = _hvp(Z, G, P)
        kappa = float(np.sum(P * B))
        if not kappa > 0:
            break
        alpha = r_old / kappa
        D += alpha * P
        np.fill_diagonal(D, 0.0)
        R -= alpha * B
        np.fill_diagonal(R, 0.0)
        r_new = float(np.sum(R * R))
        if r_new < tol_abs:
            r_old = r_new
            break
        P = R + (r_new / r_old) * P
        r_old = r_new
    if not np.any(D):
        D = _p0(-G)
    return _sym(D), passes


# ====================================================================================== params
@dataclass(frozen=True)
class COAParams:
    """Constants of COA Algorithm 1-3 (defaults: the paper text's, spec A.5 table).

    Attributes
    ----------
    theta : float
        Ridge θ in ``V = WᵀW + θ'·I``.
    relative_theta : bool
        ``θ' = θ·mean(diag WᵀW)`` (MATLAB listing) if True, else ``θ' = θ`` (paper text).
    first_step_gradient : bool
        First direction = steepest descent with zeroed diagonal (listing).
    cg_steps, cg_tol : int, float
        CG passes per Newton direction and absolute residual tolerance (listing: 5, 1e-10).
    beta, sigma : float
        Armijo back-tracking factor and sufficient-decrease constant (text: 0.1, 0.25).
    max_line_search, max_iter : int
        Trials per line search (50) and outer iterations (30).
    accuracy : float
        Stop when the relative objective decrease is below this (listing: 1e-5).
    homotopy : bool
        Algorithm 3: solve for θ = θ0, θ0·factor, ... down to ``homotopy_min`` with warm starts.
    """

    theta: float = 1e-3
    relative_theta: bool = True
    first_step_gradient: bool = True
    cg_steps: int = 5
    cg_tol: float = 1e-10
    beta: float = 0.1
    sigma: float = 0.25
    max_line_search: int = 50
    max_iter: int = 30
    accuracy: float = 1e-5
    homotopy: bool = False
    homotopy_theta0: float = 1.0
    homotopy_factor: float = 0.1
    homotopy_min: float = 1e-10

    @classmethod
    def matlab(cls, **changes: Any) -> COAParams:
        """The MATLAB listing's constants (β = 0.5, σ = 1e-4)."""
        return dataclasses.replace(cls(beta=0.5, sigma=1e-4), **changes)


# ================================================================================ dual method
class _DualEvaluator:
    """Evaluates M(y), the lower bound and the two primal candidates, full or low-rank path."""

    def __init__(
        self,
        V: FloatArray,
        w: FloatArray,
        Q: FloatArray,
        low_rank: bool,
        root_lower: float = 0.0,
        factor: FloatArray | None = None,
    ):
        self.V = V
        # a workload factor with m <= 0.8 n rows (V = FᵀF): M(y) from the m x m eigenproblem of
        # F Y Fᵀ instead of the n x n one of Y^½ V Y^½ (2.2x cheaper per iteration at m/n = 0.64)
        self.factor = factor if factor is not None and factor.shape[0] <= 0.8 * V.shape[0] else None
        self.root_lower = root_lower  # certified lower bound on Σ sqrt λ(V)
        self.tr_lower = 0.0  # certified lower bound on tr M(y) for the last evaluated y
        self.n = V.shape[0]
        self.low_rank = low_rank
        self.w: FloatArray | None = w
        self.Q = Q
        if low_rank:
            keep = w > w.max() * self.n * np.finfo(float).eps
            self.F = (np.sqrt(w[keep])[:, None] * Q[:, keep].T).copy()  # V ≈ FᵀF, F is r x n
        self.sigma = np.empty(0)
        self.vecs = np.empty((0, 0))
        self.diag_M = np.empty(0)

    def evaluate(self, y: FloatArray) -> tuple[float, FloatArray]:
        """Return (tr M, diag M) and keep the factors of M for candidate building."""
        s = np.sqrt(y)
        if not self.low_rank and self.w is not None and np.all(y == y[0]):
            # y = c·1: B = cV, whose eigendecomposition is already known
            self.sigma, self.vecs = np.sqrt(y[0] * self.w), self.Q
            self._y = y
            self.tr_lower = _round_down(math.sqrt(y[0]) * self.root_lower, 2)
        elif self.factor is not None:
            Fs = self.factor * s[None, :]
            _, U = sla.eigh(Fs @ Fs.T, driver="evd", overwrite_a=True, check_finite=False)
            P = Fs.T @ U  # columns σ_j p_j; their norms are more accurate than sqrt(μ_j) for small μ_j
            sig = np.sqrt(np.einsum("ij,ij->j", P, P))
            keep = sig > sig.max() * 1e-12
            self.sigma, self.vecs = sig[keep], P[:, keep] / sig[keep][None, :]  # M = P diag(σ) Pᵀ
            self._y = y
            # steers the iteration only: the certificate is recomputed rigorously at the best dual
            # point (factor_dual_bound), so no error allowance here
            self.tr_lower = math.fsum(self.sigma.tolist())
        elif self.low_rank:
            Fs = self.F * s[None, :]
            # singular values are computed to within p(n) eps ‖Fs‖₂ (backward stability + Weyl);
            # this bounds tr M for FᵀF, which the final certificate (on V itself) replaces
            tau = 2.0 * (sum(Fs.shape) + 2) * _EPS * float(np.linalg.norm(Fs)) * (1 + Fs.size * _EPS)
            _, sig, Pt = sla.svd(Fs, full_matrices=False, lapack_driver="gesdd")
            self.sigma, self.vecs = sig, Pt.T  # M = P diag(sig) Pᵀ
            self.tr_lower = _round_down(math.fsum(np.clip(sig - tau, 0.0, None).tolist()), 2)
        else:
            B = s[:, None] * self.V * s[None, :]
            tau = _eig_null_threshold(B)
            lam, Qb = sla.eigh(B, driver="evd", overwrite_a=True, check_finite=False)
            self.sigma, self.vecs = np.sqrt(np.clip(lam, 0.0, None)), Qb
            self.tr_lower = _sqrt_trace_lower(lam, tau)
        self.diag_M = np.einsum("ij,j,ij->i", self.vecs, self.sigma, self.vecs)
        return float(self.sigma.sum()), self.diag_M

    def normalized_objective(self, d: FloatArray) -> float:
        """Objective of X(y) rescaled to unit diagonal (full path; inf if M is singular)."""
        if self.factor is not None:
            return self._padded_objective(d)
        if self.low_rank or self.sigma.min() <= self.sigma.max() * 1e-12:
            return math.inf
        Q = self.vecs
        C = Q.T @ (np.sqrt(d)[:, None] * Q)
        return float(np.einsum("ij,j,i->", C * C, self.sigma**2, 1.0 / self.sigma))

    def _padded_chol(self, d: FloatArray) -> FloatArray | None:
        """Cholesky factor of ``X(y)/max d + diag(1 - d/max d)``: the uniformly scaled candidate
        plus one extra measurement of every cell with unused column norm.  Extra rows never raise
        the least-squares error, so it is at least as good as the uniform candidate, and it has
        unit columns and full rank (a rank-deficient V is covered)."""
        dmax = float(d.max())
        R = self.vecs * (np.sqrt(self.sigma) / np.sqrt(dmax))[None, :]
        R /= np.sqrt(self._y)[:, None]
        X = R @ R.T
        X[np.diag_indices_from(X)] += np.clip(1.0 - d / dmax, 0.0, None)
        try:
            return np.asarray(sla.cholesky(X, lower=True, overwrite_a=True, check_finite=False))
        except np.linalg.LinAlgError:
            return None

    def _padded_objective(self, d: FloatArray) -> float:
        """``tr(V X'⁻¹) = ‖L⁻¹ Wᵀ‖_F²`` of the padded candidate, every 4th iteration."""
        self._calls = getattr(self, "_calls", 0) + 1
        if self._calls % 4 or self.factor is None:
            return math.inf
        L = self._padded_chol(d)
        if L is None:
            return math.inf
        Z = sla.solve_triangular(L, self.factor.T, lower=True, check_finite=False)
        return float(np.einsum("ij,ij->", Z, Z))

    def strategy(self, y: FloatArray, kind: str) -> FloatArray:
        """The strategy for the current factors: uniform scaling or unit-column rescaling."""
        if self.factor is not None and kind == "normalized":  # the padded candidate
            L = self._padded_chol(self.diag_M / y)
            assert L is not None
            return np.ascontiguousarray(L.T)
        root = np.sqrt(self.sigma)[:, None] * self.vecs.T  # rows: sqrt(sig_k) q_kᵀ ; (·)ᵀ(·) = M
        if kind == "uniform":
            A = root / np.sqrt(y)[None, :]
            return A / math.sqrt(float(np.max(self.diag_M / y)))
        return root / np.sqrt(self.diag_M)[None, :]


class _TridiagonalDual:
    """Dual evaluator for Gram matrices with a tridiagonal inverse (prefix, all ranges).

    ``B = Y^½ V Y^½`` has the tridiagonal inverse ``Y^-½ V⁻¹ Y^-½``, whose eigendecomposition
    (LAPACK's MRRR, ``eigh_tridiagonal``) costs O(n²) instead of the O(n³) dense ``eigh``: the
    eigenvalues of B are the reciprocals and the eigenvectors are shared.  Every quantity of the
    dense evaluator follows (``tr M``, ``diag M``, the strategy); the final certificate is still
    recomputed densely (:func:`dual_lower_bound`).
    """

    def __init__(self, d: FloatArray, e: FloatArray):
        self.d, self.e = d, e
        self.n = d.size
        self.tr_lower = 0.0
        self.sigma = np.empty(0)
        self.vecs = np.empty((0, 0))
        self.diag_M = np.empty(0)

    def evaluate(self, y: FloatArray) -> tuple[float, FloatArray]:
        s = np.sqrt(y)
        dB = self.d / y
        eB = self.e / (s[:-1] * s[1:])
        self.vecs = np.empty((0, 0))  # free the previous n x n eigenvector matrix first
        mu, Q = sla.eigh_tridiagonal(dB, eB, lapack_driver="stemr")
        mu = np.maximum(mu, _EPS * float(np.max(np.abs(mu))))
        self.sigma = 1.0 / np.sqrt(mu)
        self.vecs = Q
        # steers the iteration only: the certificate is recomputed rigorously at the best dual
        # point (tridiagonal_dual_bound), so no error allowance here
        self.tr_lower = math.fsum(self.sigma.tolist())
        self.diag_M = np.concatenate([(Q[b] * Q[b]) @ self.sigma for b in _row_blocks(self.n)])
        return float(self.sigma.sum()), self.diag_M

    def normalized_objective(self, d: FloatArray) -> float:
        """Objective of the unit-column rescaling: one O(n³) product, so every 4th iteration only
        (the uniform candidate's gap is the diagonal's deviation, which stalls near 1e-4).

        ``Σ_ij C_ij² σ_j² / σ_i`` with ``C = Qᵀ diag(√d) Q``, accumulated over column blocks of C
        (no n x n temporary)."""
        self._calls = getattr(self, "_calls", 0) + 1
        if self._calls % 4:
            return math.inf
        Q, root_d = self.vecs, np.sqrt(d)
        acc = np.zeros(self.n)
        for b in _row_blocks(self.n):
            Cb = Q.T @ (root_d[:, None] * Q[:, b])
            Cb *= Cb
            acc += Cb @ (self.sigma[b] ** 2)
        return float(acc @ (1.0 / self.sigma))

    def strategy(self, y: FloatArray, kind: str) -> FloatArray:
        # rows sqrt(σ_k) q_kᵀ scaled per column, built in one n x n array (no temporaries)
        A = np.multiply(self.vecs.T, np.sqrt(self.sigma)[:, None])
        if kind == "uniform":
            A *= (1.0 / np.sqrt(y) / math.sqrt(float(np.max(self.diag_M / y))))[None, :]
        else:
            A *= (1.0 / np.sqrt(self.diag_M))[None, :]
        return A


def _row_blocks(n: int, size: int = 512) -> list[slice]:
    return [slice(i, min(i + size, n)) for i in range(0, n, size)]


def _tridiagonal_inverse(wl: Workload, n: int) -> tuple[FloatArray, FloatArray] | None:
    """``(diagonal, off-diagonal)`` of ``V⁻¹`` when it is tridiagonal in closed form, else None."""
    from dpopt.linear_queries.workloads import AllRange, Prefix

    if isinstance(wl, Prefix) and n >= 2:  # V = LᵀL, L⁻¹ = first differences
        d = np.full(n, 2.0)
        d[0] = 1.0
        return d, -np.ones(n - 1)
    if isinstance(wl, AllRange) and n >= 2:  # V = (n+1)·Green's function of -Δ (Dirichlet)
        return np.full(n, 2.0 / (n + 1)), np.full(n - 1, -1.0 / (n + 1))
    return None


def _sturm_counts(d: FloatArray, e2: FloatArray, shifts: FloatArray, pivmin: float) -> NDArray[np.intp]:
    """Number of eigenvalues below each shift of the symmetric tridiagonal (``d``, ``e² = e2``).

    The LDLᵀ (Sturm) recurrence ``q_i = (d_i - σ) - e²_{i-1} / q_{i-1}``, vectorized over the shifts
    (LAPACK's ``dstebz`` rule: a pivot smaller than ``pivmin`` becomes ``-pivmin``).  In floating
    point the count is exact for a matrix whose entries differ from the given ones by a few ulps
    each, componentwise (Kahan 1966; Demmel, *Applied Numerical Linear Algebra*, §5.3.4).
    """
    q = d[0] - shifts
    q = np.where(np.abs(q) < pivmin, -pivmin, q)
    count = (q < 0).astype(np.intp)
    for i in range(1, d.size):
        q = (d[i] - shifts) - e2[i - 1] / q
        q = np.where(np.abs(q) < pivmin, -pivmin, q)
        count += q < 0
    return count


def _gram_norm_bound(wl: Workload, n: int) -> float | None:
    """Upper bound on ``‖V‖₂`` (the largest row sum of V, in closed form) for prefix and all-range."""
    from dpopt.linear_queries.workloads import AllRange, Prefix

    j = np.arange(n, dtype=np.float64)  # integer-valued sums below are exact up to 2^53
    if isinstance(wl, Prefix):  # row j: Σ_k n - max(j, k)
        rows = j * (n - j) + (n - j) * (n - j + 1) / 2
    elif isinstance(wl, AllRange):  # row j: Σ_k (min(j, k) + 1)(n - max(j, k))
        rows = (n - j) * j * (j + 1) / 2 + (j + 1) * (n - j) * (n - j + 1) / 2
    else:
        return None
    return float(rows.max()) * (1.0 + 8.0 * _EPS)


def tridiagonal_dual_bound(
    d: ArrayLike, e: ArrayLike, y: ArrayLike, *, gram_norm: float | None = None
) -> float:
    """Certified dual bound ``tr((Y^½ V Y^½)^½)² / Σy`` for ``V⁻¹ = tridiag(e, d, e)``, in O(n²).

    ``B = Y^½ V Y^½`` has the tridiagonal inverse ``T = Y^-½ V⁻¹ Y^-½``, so ``tr B^½ = Σ μ_i^-½``
    over the eigenvalues ``μ_i`` of ``T``.  Upper bounds ``u_i >= μ_i`` are verified by Sturm
    counts (at least ``i`` eigenvalues below ``u_i``), which are exact for a componentwise
    perturbation of ``T`` of a few ulps; that perturbation, the rounding of ``T``'s entries and of
    ``V⁻¹``'s given entries are covered by ``Δ = 16 eps · max row sum of |T|`` (a bound on the
    2-norm of a componentwise ``16 eps |T|`` perturbation), added to every ``u_i``.  Unlike the
    dense certificate (:func:`dual_lower_bound`, whose eigenvalue error allowance grows like
    ``n eps ‖B‖``), the loss is a few ulps of ``T`` with no factor n: the bound certifies relative
    gaps far below 1e-7 at n in the thousands.

    With ``gram_norm >= ‖V‖₂`` a second, relative allowance is used where it is smaller: the
    perturbation behind the Sturm counts is componentwise relative in the entries of ``T``, i.e. of
    ``V⁻¹`` (plus relative roundings of y), so the counted matrix is ``Y^-½ (V⁻¹ + E) Y^-½`` with
    ``‖V^½ E V^½‖₂ <= η = 16 eps ‖|V⁻¹|‖_∞ ‖V‖₂`` and every eigenvalue moves by a factor within
    ``[1 - η, 1 + η]`` whatever the scaling of y (the absolute allowance ``Δ`` grows like
    ``1 / min(y)``, which dominates at badly scaled dual points).
    """
    da = np.asarray(d, dtype=np.float64)
    ea = np.asarray(e, dtype=np.float64)
    ya = np.clip(np.asarray(y, dtype=np.float64), 0.0, None)
    n = da.size
    if ea.shape != (max(n - 1, 0),) or ya.shape != (n,) or n == 0:
        raise InvalidParameterError("d, e, y: expected lengths n, n - 1 and n")
    if not (np.all(np.isfinite(ya)) and np.all(ya > 0)):
        raise InvalidParameterError("y: expected a finite positive vector")
    s = np.sqrt(ya)
    dT = da / (s * s)  # the bound holds for ŷ = s², whose sum is bounded below
    eT = ea / (s[:-1] * s[1:])
    mu = sla.eigh_tridiagonal(dT, eT, eigvals_only=True, lapack_driver="stemr") if n > 1 else dT.copy()
    row = np.abs(dT).copy()
    row[:-1] += np.abs(eT)
    row[1:] += np.abs(eT)
    norm = float(row.max())
    e2 = eT * eT
    pivmin = float(np.finfo(np.float64).tiny) * max(1.0, float(e2.max()) if e2.size else 1.0)
    delta = 16.0 * _EPS * norm + 2.0 * pivmin
    # relative start (MRRR's eigenvalues of this positive definite T are relatively accurate);
    # the Sturm counts below verify it and widen it where they fail
    slack = np.maximum(8.0 * _EPS * np.abs(mu), (4.0 * _EPS * norm) if gram_norm is None else 4.0 * pivmin)
    need = np.arange(1, n + 1)
    u = np.maximum.accumulate(mu + slack)
    for _ in range(60):
        bad = _sturm_counts(dT, e2, u, pivmin) < need
        if not bad.any():
            break
        slack = np.where(bad, 4.0 * slack, slack)
        u = np.maximum.accumulate(np.maximum(u, mu + slack))
    else:  # pragma: no cover - Sturm counts always succeed once u exceeds ‖T‖
        return 0.0
    upper = (u + delta) * (1.0 + 2.0 * _EPS)  # μ_i(T) <= u_i + Δ, rounded up
    if gram_norm is not None and gram_norm > 0:
        inv_norm = float(
            np.max(np.abs(da) + np.abs(np.concatenate([[0.0], ea])) + np.abs(np.concatenate([ea, [0.0]])))
        )
        eta = 16.0 * _EPS * inv_norm * (1.0 + 4.0 * _EPS) * float(gram_norm)
        if eta < 0.5:  # μ_i <= (u_i + 2 pivmin)(1 + 16 eps) / (1 - η), rounded up
            rel = (u + 2.0 * pivmin) * (1.0 + 16.0 * _EPS) / (1.0 - eta) * (1.0 + 4.0 * _EPS)
            upper = np.minimum(upper, rel)
    root = _round_down(math.fsum((1.0 / np.sqrt(upper)).tolist()), 3)
    ysum = math.fsum((s * s).tolist()) * (1.0 + 4.0 * _EPS)
    return _round_down(root * root / ysum, 2)


def _solve_dual(
    V: FloatArray,
    *,
    tol: float,
    max_iter: int,
    max_time: float | None,
    memory: int,
    exponent: float,
    callback: _IterateCallback | None,
    w: FloatArray,
    Q: FloatArray,
    root_lower: float = 0.0,
    evaluator: Any = None,
    factor: FloatArray | None = None,
) -> tuple[FloatArray, float, float, str, int, list[dict[str, Any]], FloatArray]:
    """The dual fixed point; ``evaluator`` (with ``n`` and :class:`_DualEvaluator`'s methods)
    replaces the dense one (e.g. the block-diagonal problems of unions of products)."""
    if evaluator is not None:
        ev = evaluator
        n = int(ev.n)
        u = np.zeros(n)
    else:
        n = V.shape[0]
        rank = int(np.sum(w > w.max() * n * np.finfo(float).eps))
        ev = _DualEvaluator(V, w, Q, low_rank=rank <= 0.6 * n, root_lower=root_lower, factor=factor)
        u = np.full(n, math.log(max(np.sqrt(w).sum() / n, 1e-300)))
    best_lb, best_ub = -math.inf, math.inf
    best_steer = math.inf
    padded_only = getattr(ev, "factor", None) is not None
    best: tuple[FloatArray, str] | None = None
    best_A: FloatArray | None = None
    best_y = np.ones(n)
    us: list[FloatArray] = []
    fs: list[FloatArray] = []
    history: list[dict[str, Any]] = []
    status = "max_iter"
    t0 = time.process_time()
    k = stall = plain = 0
    for k in range(1, max_iter + 1):
        y = np.exp(u)
        trM, diagM = ev.evaluate(y)
        d = diagM / y
        lb = _round_down(ev.tr_lower**2 / (math.fsum(y.tolist()) * (1 + 4 * _EPS)), 2)
        ub_uniform = trM * float(d.max())
        ub_norm = ev.normalized_objective(d)
        if lb > best_lb:  # the fast bound steers the iteration; the certificate is recomputed at best_y
            best_lb, best_y = lb, y
        improved = False
        if ub_uniform < best_ub:
            best_ub, best, improved = ub_uniform, (y, "uniform"), True
        if ub_norm < best_ub:
            best_ub, best, improved = ub_norm, (y, "normalized"), True
        # the factor path's padded candidate only closes the gap: the Anderson restarts below
        # follow the uniform candidate alone, so the dual iterates are those without it
        if padded_only:
            improved_steer = ub_uniform < best_steer
            best_steer = min(best_steer, ub_uniform)
        else:
            improved_steer = improved
        if improved and best is not None:
            best_A = None  # free the old strategy first (n x n at the peak)
            best_A = ev.strategy(*best)
        gap = (best_ub - best_lb) / best_lb
        rec = {
            "iteration": k,
            "objective": best_ub,
            "lower_bound": best_lb,
            "gap": gap,
            "max_diag_deviation": float(np.max(np.abs(d - 1))),
            "cpu_seconds": time.process_time() - t0,
        }
        history.append(rec)
        if callback is not None and best_A is not None and callback(dict(rec), best_A):
            status = "stopped"
            break
        if gap <= tol:
            status = "converged"
            break
        if max_time is not None and time.process_time() - t0 > max_time:
            status = "max_time"
            break
        with np.errstate(divide="ignore"):
            f = exponent * np.log(d)
        if not np.all(np.isfinite(f)):
            f = np.where(np.isfinite(f), f, 0.0)
        us.append(u.copy())
        fs.append(f)
        if len(us) > memory + 1:
            us.pop(0)
            fs.pop(0)
        step = u + f
        if improved_steer:
            stall = 0
        else:
            stall += 1
        if stall > memory + 2:  # Anderson is not helping here: restart from plain steps
            us, fs, stall = [], [], 0
            plain = 2 * (memory + 2)
        if plain > 0:
            plain -= 1
        elif memory > 0 and len(us) > 1:
            dF = np.diff(np.array(fs), axis=0).T
            dU = np.diff(np.array(us), axis=0).T
            gamma, *_ = np.linalg.lstsq(dF, f, rcond=None)
            cand = u + f - (dU + dF) @ gamma
            if np.all(np.isfinite(cand)) and np.max(np.abs(cand - u)) < 20:
                step = cand
            else:
                us, fs = [], []
        # y_i -> 0 where a column constraint is inactive; keep y_i >= e^-30 max(y) so the
        # rescaled strategy keeps the workload in its row space to working precision
        u = np.maximum(step, float(step.max()) - _LOG_Y_RANGE)
    assert best_A is not None
    return best_A, best_ub, best_lb, status, k, history, best_y


# ============================================================================== primal Newton
def _primal_newton(
    V_reg: FloatArray,
    V0: FloatArray,
    X0: FloatArray,
    params: COAParams,
    *,
    forcing: bool,
    certify: bool,
    tol: float,
    first_gradient: bool,
    history: list[dict[str, Any]],
    callback: _IterateCallback | None,
    max_time: float | None,
    t0: float,
    k0: int = 0,
) -> tuple[FloatArray, str, int, float]:
    """Algorithm 1 (damped Newton, Armijo, Cholesky PD test).  Returns (X, status, iters, best LB)."""
    X = X0
    Z = _chol_inverse(X)
    if Z is None:
        raise InvalidParameterError("X0: the starting point must be positive definite")
    F = float(np.sum(Z * V_reg))
    G = _sym(-(Z @ V_reg @ Z))
    status = "max_iter"
    best_lb = -math.inf
    k = 0
    for k in range(1, params.max_iter + 1):
        pg = float(np.linalg.norm(_p0(G)))
        if k == 1 and first_gradient:
            D, passes = _sym(_p0(-G)), 0
        else:
            eta = min(0.5, math.sqrt(pg / max(abs(F), 1e-300))) if forcing else None
            D, passes = modified_cg(Z, G, params.cg_steps, tol_abs=params.cg_tol, forcing=eta)
        slope = float(np.sum(G * D))
        accepted = False
        alpha = 1.0
        trials = 0
        Xt = Zt = None
        Ft = math.inf
        for j in range(params.max_line_search):
            trials = j + 1
            alpha = params.beta**j
            Xt = _sym(X + alpha * D)
            Zt = _chol_inverse(Xt)
            if Zt is None:
                continue
            Ft = float(np.sum(Zt * V_reg))
            if Ft <= F + alpha * params.sigma * slope:
                accepted = True
                break
        if not accepted or Xt is None or Zt is None:
            status = "failed"
            break
        F_old = F
        X, Z, F = Xt, Zt, Ft
        G = _sym(-(Z @ V_reg @ Z))
        obj = float(np.sum(Z * V0))
        rec: dict[str, Any] = {
            "iteration": k0 + k,
            "objective": obj,
            "regularized_objective": F,
            "grad_norm": float(np.linalg.norm(G)),
            "proj_grad_norm": float(np.linalg.norm(_p0(G))),
            "step_norm": float(np.linalg.norm(D)),
            "step": alpha,
            "cg_passes": passes,
            "line_search_trials": trials,
            "cpu_seconds": time.process_time() - t0,
        }
        if certify:
            y0 = np.clip(np.diag(Z @ V0 @ Z), 0.0, None)
            if y0.sum() > 0:
                best_lb = max(best_lb, dual_lower_bound(V0, y0))
            rec["lower_bound"] = best_lb
            rec["gap"] = (obj - best_lb) / best_lb if best_lb > 0 else math.inf
        history.append(rec)
        if callback is not None and callback(dict(rec), _strategy_from_X(X)):
            status = "stopped"
            break
        if certify and rec["gap"] <= tol:
            status = "converged"
            break
        if not certify and abs(F_old - F) / abs(F_old) <= params.accuracy:
            status = "converged"  # the paper's relative-decrease rule (no certificate)
            break
        if max_time is not None and time.process_time() - t0 > max_time:
            status = "max_time"
            break
    return X, status, k, best_lb


_IterateCallback = Callable[[dict[str, Any], FloatArray], Any]


def _embed(
    A_s: FloatArray, support: NDArray[np.intp], n_full: int, classes: NDArray[np.intp] | None = None
) -> FloatArray:
    """The strategy on the full domain: zero columns off ``support``, column norms at most one.

    Column ``classes[i]`` of ``A_s`` goes to cell ``support[i]`` (cells with identical workload
    columns share one column of the reduced problem, see :func:`_column_classes`; default: column
    i).  When every cell is its own column, ``A_s`` itself is returned (no n x n copy).
    """
    col = float(np.max(np.sum(A_s**2, axis=0)))
    if classes is None and support.size == n_full:  # support is then 0..n-1
        A = A_s
    else:
        A = np.zeros((A_s.shape[0], n_full))
        A[:, support] = A_s if classes is None else A_s[:, classes]
    if col > 1.0:
        A = A / math.sqrt(col)
    return A


def _workload_factor(wl: Workload, cols: NDArray[np.intp], n: int) -> FloatArray | None:
    """``W[:, cols]`` when the workload has fewer rows than columns (``m < n``) and is given
    explicitly (intervals or a matrix): the final certificate is then the sum of the singular
    values of ``W Y^½`` (:func:`factor_dual_bound`), whose error allowance is absolute per term,
    instead of square roots of the eigenvalues of ``Y^½ V Y^½`` (which lose ``sqrt(n eps)``-sized
    amounts on the many small eigenvalues of rank-deficient workloads)."""
    from dpopt.linear_queries.workloads import MatrixWorkload, Ranges

    m = wl.n_queries
    if not isinstance(wl, Ranges | MatrixWorkload) or m >= n or m * wl.domain_size > 2**27:
        return None
    return np.ascontiguousarray(wl.matrix()[:, cols])


def _column_classes(
    V: FloatArray, support: NDArray[np.intp]
) -> tuple[NDArray[np.intp], NDArray[np.intp]] | None:
    """Group the measured cells whose workload columns are identical (rows of ``V`` equal).

    Returns ``(representatives, classes)``: one cell per group (sorted) and, for every cell of
    ``support``, the index of its group; None when all columns differ.  Columns i and j of W are
    equal exactly when rows i and j of ``V = WᵀW`` are (``‖w_i - w_j‖² = V_ii + V_jj - 2 V_ij``).
    Rows are grouped by a digest of their bytes and then compared exactly, in O(n²).
    """
    groups: dict[bytes, int] = {}
    classes = np.empty(support.size, dtype=np.intp)
    reps: list[int] = []
    import hashlib

    for i, j in enumerate(support.tolist()):
        row = V[j, support]
        key = hashlib.blake2b(row.tobytes(), digest_size=16).digest()
        g = groups.get(key)
        if g is None or not np.array_equal(row, V[reps[g], support]):
            if g is not None:  # pragma: no cover - a digest collision: keep the rows apart
                key += i.to_bytes(8, "little")
            g = groups[key] = len(reps)
            reps.append(j)
        classes[i] = g
    if len(reps) == support.size:
        return None
    return np.asarray(reps, dtype=np.intp), classes


def _strategy_from_X(X: FloatArray) -> FloatArray:
    """Upper Cholesky factor R (RᵀR = X), as the listing's ``A = chol(X)``."""
    return np.asarray(sla.cholesky(X, lower=False))


# =================================================================================== front door
def optimize_strategy(
    workload: Workload | ArrayLike,
    *,
    method: Method = "dual",
    tol: float = 1e-4,
    max_iter: int | None = None,
    max_time: float | None = None,
    params: COAParams | None = None,
    anderson_memory: int = 5,
    callback: Callback | None = None,
    max_memory: float | None = None,
    warn: bool = True,
    progress: bool = False,
    cache_dir: str | os.PathLike[str] | None = None,
) -> StrategyResult:
    """Optimize a Gaussian matrix-mechanism strategy for ``workload`` (no data, no privacy cost).

    Parameters
    ----------
    workload : Workload or array of shape (m, n)
        The queries (a dense array is wrapped by :func:`~dpopt.linear_queries.workloads.from_matrix`).
    method : {"dual", "paper", "newton"}, default "dual"
        See the module docstring.  ``"paper"`` reproduces COA's Algorithms 1-3.
    tol : float, default 1e-4
        Target relative certified gap (methods ``"dual"`` and ``"newton"``).
    max_iter : int, optional
        Outer iterations (default 500 for ``"dual"``, ``params.max_iter`` otherwise).
    max_time : float, optional
        CPU-second limit (status ``"max_time"``).
    params : COAParams, optional
        Constants of the Newton methods (default :class:`COAParams`).
    anderson_memory : int, default 5
        Anderson-mixing memory of the dual method (0 = plain fixed point).
    callback : callable, optional
        ``callback(info)`` after every iteration with a :class:`dpopt.iteration.IterationInfo`:
        ``info.nit``, ``info.x`` (= ``info["strategy"]``, the current iterate as an array of shape
        (p, n) with column norms at most one; for ``"dual"`` the best strategy so far) and the
        history record's fields (``info["objective"]``, ``info["lower_bound"]``, ``info["gap"]``,
        ...); returning ``True`` or raising ``StopIteration`` stops (status ``"stopped"``).
    max_memory : float, optional
        Memory limit in bytes (default: the available physical memory).  The optimizer refuses,
        with its estimate, when it would need more.
    warn : bool, default True
        Emit a :class:`~dpopt.exceptions.ConvergenceWarning` when the tolerance is not met.
    progress : bool, default False
        Show a progress bar (rich) with the certified gap, after printing the memory and
        per-iteration time estimates (useful for n in the thousands).
    cache_dir : path, optional
        Directory of saved strategies keyed by the workload's fingerprint, the method and the
        tolerance: a hit is loaded instead of recomputed, a miss is computed and saved.  Strategies
        are data independent, so one cached strategy serves every budget and dataset.

    Returns
    -------
    StrategyResult
        Strategy with unit column norms, objective, certified lower bound and gap.  Cells that no
        query touches get zero columns (they are not measured).
    """
    wl = _check_workload(workload)
    tol = check_nonneg(tol, "tol")
    if method not in ("dual", "paper", "newton"):
        raise InvalidParameterError("method: must be 'dual', 'paper' or 'newton'")
    params = COAParams() if params is None else params
    if not isinstance(params, COAParams):
        raise InvalidParameterError("params: expected a COAParams instance")
    if max_time is not None:
        max_time = check_positive(max_time, "max_time")
    if cache_dir is not None:
        cache = Path(cache_dir)
        cache.mkdir(parents=True, exist_ok=True)
        entry = cache / f"{wl.fingerprint()[:24]}-{method}-tol{tol:.0e}.npz"
        if entry.is_file() and max_iter is None and params == COAParams():
            return StrategyResult.load(entry, workload=wl)
        result = optimize_strategy(
            wl,
            method=method,
            tol=tol,
            max_iter=max_iter,
            max_time=max_time,
            params=params,
            anderson_memory=anderson_memory,
            callback=callback,
            max_memory=max_memory,
            warn=warn,
            progress=progress,
        )
        if max_iter is None and params == COAParams():
            result.save(entry)
        return result
    if isinstance(wl, Marginals) and method != "paper":
        return _optimize_marginals(wl, method=method)
    if method != "paper" and wl.domain_size > _DENSE_PRODUCT_LIMIT:
        from dpopt.linear_queries.union import is_union_of_products, optimize_union

        if is_union_of_products(wl):
            return optimize_union(wl)
    if isinstance(wl, Kronecker):
        return _optimize_kronecker(
            wl,
            method=method,
            tol=tol,
            max_iter=max_iter,
            max_time=max_time,
            params=params,
            anderson_memory=anderson_memory,
            max_memory=max_memory,
            warn=warn,
        )
    n_full = wl.domain_size
    classes: NDArray[np.intp] | None = None
    if method == "dual" and n_full > _VERIFY_LIMIT and _tridiagonal_inverse(wl, n_full) is not None:
        # O(n²) iterations and certificate from the closed-form tridiagonal V⁻¹: V is never formed
        _check_memory(n_full, max_memory, copies=_STRUCTURED_COPIES)
        V = np.empty((0, 0))
        support = reps = np.arange(n_full)
        t0, w0 = time.process_time(), time.perf_counter()
    else:
        _check_memory(n_full, max_memory)
        V_full = wl.gram()
        if not np.all(np.isfinite(V_full)):
            raise InvalidParameterError("workload: its Gram matrix has non-finite entries")
        support = np.flatnonzero(np.diag(V_full) > 0)
        if support.size == 0:
            raise InvalidParameterError("workload: every column is zero; there is nothing to answer")
        reps = support
        t0, w0 = time.process_time(), time.perf_counter()  # the grouping counts as optimization time
        found = _column_classes(V_full, support) if method == "dual" else None
        if found is not None:  # cells with identical columns: solve on one cell per group
            reps, classes = found
            V = V_full[np.ix_(reps, reps)]
        elif support.size == n_full:  # no copy when every cell is measured (512 MiB at n = 8192)
            V = np.ascontiguousarray(V_full)
        else:
            V = V_full[np.ix_(support, support)]
    n = support.size if V.size == 0 else V.shape[0]
    factor = _workload_factor(wl, reps, n) if method == "dual" and V.size else None

    bar = None
    if progress:
        bar, callback = _progress_bar(n, method, tol, callback)
    try:
        with _blas_threads(n):
            return _optimize(
                wl,
                V,
                support,
                n_full,
                method,
                tol,
                max_iter,
                max_time,
                params,
                anderson_memory,
                callback,
                warn,
                t0,
                w0,
                classes,
                factor,
            )
    finally:
        if bar is not None:
            bar.stop()


def _blas_threads(n: int) -> contextlib.AbstractContextManager[Any]:
    """One BLAS thread for small problems (threading only adds overhead there, badly so on busy machines)."""
    global _CONTROLLER
    if n > _SMALL_N:
        return contextlib.nullcontext()
    if _CONTROLLER is None:
        try:
            from threadpoolctl import ThreadpoolController
        except ImportError:  # pragma: no cover - threadpoolctl comes with scikit-learn
            return contextlib.nullcontext()
        _CONTROLLER = ThreadpoolController()  # scanning the loaded libraries is slow: do it once
    return _CONTROLLER.limit(limits=1, user_api="blas")


def _progress_bar(n: int, method: str, tol: float, callback: Callback | None) -> tuple[Any, Callback]:
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    per_iter = estimate_seconds_per_iteration(n, method)
    Console(stderr=True).print(
        f"optimize_strategy: n={n}, method={method!r}: needs ≈{estimate_memory(n) / 2**30:.2f} GiB; "
        f"≈{per_iter:.3g} CPU s per iteration (single-threaded BLAS estimate)"
    )
    bar = Progress(
        TextColumn("[bold]strategy[/] it {task.completed:>4.0f}"),
        BarColumn(),
        TextColumn("gap {task.fields[gap]}"),
        TimeElapsedColumn(),
        transient=False,
        console=Console(stderr=True),
    )
    task = bar.add_task("optimize", total=None, gap="-")
    bar.start()
    user = callback

    def cb(info: IterationInfo) -> bool:
        gap = info["gap"] if "gap" in info else None
        bar.update(task, completed=info.nit, gap="-" if gap is None else f"{gap:.2e} (target {tol:.0e})")
        return wants_stop(user, info)

    return bar, cb


def estimate_seconds_per_iteration(n: int, method: str = "dual") -> float:
    """Rough single-threaded CPU seconds per outer iteration (measured: ≈0.3 s at n = 1024, ∝ n³)."""
    base = 0.3 if method == "dual" else 0.65
    return base * (check_int(n, "n") / 1024) ** 3


def _optimize(
    wl: Workload,
    V: FloatArray,
    support: NDArray[np.intp],
    n_full: int,
    method: str,
    tol: float,
    max_iter: int | None,
    max_time: float | None,
    params: COAParams,
    anderson_memory: int,
    callback: Callback | None,
    warn: bool,
    t0: float,
    w0: float,
    classes: NDArray[np.intp] | None = None,
    factor: FloatArray | None = None,
) -> StrategyResult:
    n = support.size if V.size == 0 else V.shape[0]
    full = support.size == n_full and classes is None
    tri = _tridiagonal_inverse(wl, n) if method == "dual" and full else None
    evaluator: Any = None
    if tri is not None and n > _SMALL_N:  # structure-aware: O(n²) per iteration
        mu = sla.eigh_tridiagonal(*tri, eigvals_only=True, lapack_driver="stemr")
        Q = np.empty((0, 0))  # not needed: the evaluator computes its own eigenvectors
        lam = 1.0 / mu
        tau = 4.0 * n * _EPS * float(np.max(np.abs(tri[0])) + 2 * np.max(np.abs(tri[1])))
        root_lower = _round_down(math.fsum((1.0 / np.sqrt(mu + tau)).tolist()), 3)
        evaluator = _TridiagonalDual(*tri)
    else:
        lam, Q = sla.eigh(V, driver="evd")
        # certified: eigenvalues within eigh's error bound of 0 count as 0, the rest are lowered by it
        root_lower = _sqrt_trace_lower(lam, _eig_null_threshold(V))
    w = np.clip(lam, 0.0, None)
    svd_bound = _round_down(root_lower**2 / n, 2)
    history: list[dict[str, Any]] = []
    run_params: dict[str, Any] = {"tol": tol}
    user_callback = callback

    def with_iterate(rec: dict[str, Any], A_it: FloatArray) -> bool:
        strategy = _embed(A_it, support, n_full, classes)
        return notify(user_callback, int(rec["iteration"]), strategy, **rec, strategy=strategy)

    inner = None if user_callback is None else with_iterate
    if method == "dual":
        iters = 500 if max_iter is None else check_int(max_iter, "max_iter")
        A_s, obj, _, status, n_iter, history, best_y = _solve_dual(
            V,
            # the structured path steers by an uncertified bound, within ~1e-8 of the certificate
            tol=tol if evaluator is None and factor is None else tol - min(0.5 * tol, 5e-8),
            max_iter=iters,
            max_time=max_time,
            memory=check_int(anderson_memory, "anderson_memory", minimum=0),
            exponent=2.0,
            callback=inner,
            w=w,
            Q=Q,
            root_lower=root_lower,
            evaluator=evaluator,
            factor=factor,
        )
        run_params.update(max_iter=iters, anderson_memory=anderson_memory)
        if evaluator is not None:
            run_params["structure"] = "tridiagonal inverse (O(n²) per iteration)"
        if classes is not None:
            run_params["structure"] = f"{n} classes of identical columns"
        if evaluator is None and factor is not None and factor.shape[0] <= 0.8 * n:
            run_params["iteration"] = f"{factor.shape[0]} x {factor.shape[0]} eigenproblem of W Y Wᵀ"
        if tri is not None and evaluator is not None:  # O(n²) Sturm-count certificate, no n·eps loss
            dual_lb = tridiagonal_dual_bound(tri[0], tri[1], best_y, gram_norm=_gram_norm_bound(wl, n))
        elif factor is not None:  # singular values of W Y^½: no square-root loss on small eigenvalues
            dual_lb = factor_dual_bound(factor, best_y)
            run_params["certificate"] = "singular values of the workload's columns"
        else:
            dual_lb = dual_lower_bound(V, best_y)  # the certificate, rigorous in floating point
    else:
        if max_iter is not None:
            params = dataclasses.replace(params, max_iter=check_int(max_iter, "max_iter"))
        run_params.update(dataclasses.asdict(params))
        scale = float(np.mean(np.diag(V))) if params.relative_theta else 1.0
        singular = w.min() <= w.max() * n * np.finfo(float).eps
        if singular and (params.theta <= 0 or (params.homotopy and params.homotopy_min <= 0)):
            raise InvalidParameterError(
                f"theta: the workload's Gram matrix is rank deficient (rank {int(np.sum(w > w.max() * 1e-12))} "
                f"< n = {n}), so method={method!r} needs a ridge θ > 0 (the θ = 0 optimum is singular); "
                "use theta > 0, the homotopy, or method='dual', which handles singular workloads exactly"
            )
        if method == "paper":
            run_params["stopping_rule"] = (
                "relative objective decrease <= accuracy (the paper's; no certificate)"
            )
            X = np.eye(n)
            thetas = [params.theta]
            if params.homotopy:
                thetas, th = [], params.homotopy_theta0
                while th >= params.homotopy_min * (1 - 1e-9):
                    thetas.append(th)
                    th *= params.homotopy_factor
            status, n_iter = "max_iter", 0
            for theta in thetas:
                V_reg = V + theta * scale * np.eye(n)
                X, status, k, _ = _primal_newton(
                    V_reg,
                    V,
                    X,
                    params,
                    forcing=False,
                    certify=False,
                    tol=tol,
                    first_gradient=params.first_step_gradient,
                    history=history,
                    callback=inner,
                    max_time=max_time,
                    t0=t0,
                    k0=n_iter,
                )
                n_iter += k
                if status in ("stopped", "max_time"):
                    break
            dual_lb = -math.inf
        else:  # newton
            full_rank = w.min() > w.max() * 1e-10
            theta = 0.0 if full_rank else params.theta * scale  # ridge only where V is singular
            V_reg = V + theta * np.eye(n)
            wr = w + theta
            root = (Q * np.sqrt(wr)) @ Q.T
            dg = np.sqrt(np.diag(root))
            X0 = _sym(root / np.outer(dg, dg))
            newton_params = dataclasses.replace(params, cg_steps=max(params.cg_steps, 50))
            X, status, n_iter, dual_lb = _primal_newton(
                V_reg,
                V,
                X0,
                newton_params,
                forcing=True,
                certify=True,
                tol=tol,
                first_gradient=False,
                history=history,
                callback=inner,
                max_time=max_time,
                t0=t0,
            )
        A_s = _strategy_from_X(X)
        Z = _chol_inverse(X)
        assert Z is not None
        obj = float(np.sum(Z * V))
        y0 = np.clip(np.diag(Z @ V @ Z), 0.0, None)
        if y0.sum() > 0:
            dual_lb = max(dual_lb, dual_lower_bound(V, y0))
    cpu, wall = time.process_time() - t0, time.perf_counter() - w0

    # embed into the full domain (unmeasured cells get zero columns) and evaluate exactly
    A = _embed(A_s, support, n_full, classes)
    if n <= _VERIFY_LIMIT:
        exact, bias = strategy_error(A_s, V)  # independent re-evaluation (one SVD of A)
    else:  # the SVD would cost more than the optimization; obj is exact for these strategies
        exact, bias = obj, 0.0
        run_params["re_evaluated"] = False
    objective = exact if math.isfinite(exact) else obj
    lower = max(dual_lb, svd_bound)
    if lower > objective:
        # Both bounds are rigorous for V, so this can only come from rounding in the objective
        # (or a bug): lower the bound rather than report a negative gap, and say so.
        run_params["lower_bound_lowered_by"] = float((lower - objective) / objective)
        lower = objective
    gap = (objective - lower) / lower if lower > 0 else math.inf
    if status == "converged" and gap > tol * (1 + 1e-6) + 1e-12:
        status = "max_iter" if method == "dual" else status
    if bias > 1e-8:
        import warnings

        warnings.warn(
            f"the optimized strategy misses a relative {bias:.1e} of the workload's row space (numerical "
            "rank loss); answers are slightly biased and the objective is not exact",
            ConvergenceWarning,
            stacklevel=3,
        )
    if warn and method != "paper" and status not in ("converged", "stopped"):
        import warnings

        warnings.warn(
            f"optimize_strategy({method!r}) stopped with status {status!r} at certified gap {gap:.2e} "
            f"(tol {tol:.1e}); the strategy is valid but may be suboptimal",
            ConvergenceWarning,
            stacklevel=3,
        )
    return StrategyResult(
        strategy=A,
        objective=float(objective),
        lower_bound=float(lower),
        dual_bound=float(dual_lb),
        svd_bound=svd_bound,
        gap=float(gap),
        method=method,
        status=status,
        n_iter=int(n_iter),
        cpu_seconds=cpu,
        wall_seconds=wall,
        history=tuple(history),
        workload_fingerprint=wl.fingerprint(),
        bias=float(bias),
        params=run_params,
    )


_DENSE_PRODUCT_LIMIT = 4096
_DENSE_MARGINALS_LIMIT = 0  # the closed form's strategy is implicit (plan_from_result(...).dense_matrix())


def _empty_strategy(N: int) -> FloatArray:
    """The placeholder ``(0, N)`` strategy of implicit results (``(0, 0)`` past numpy's index range)."""
    return np.zeros((0, N)) if N < 2**62 else np.zeros((0, 0))


def _optimize_kronecker(
    wl: Kronecker, *, method: Method, tol: float, warn: bool, **options: Any
) -> StrategyResult:
    """Solve a product workload per factor; the products of the bounds certify the product strategy.

    For ``V = ⊗V_i`` and ``X = ⊗X_i``: f(X) = Π f_i(X_i); with ``y = ⊗y_i`` the dual bound is
    ``Π LB_i(y_i)``, so per-factor certificates multiply.
    """
    d = len(wl.factors)
    tol_i = (1.0 + tol) ** (1.0 / d) - 1.0
    parts = [optimize_strategy(f, method=method, tol=tol_i, warn=False, **options) for f in wl.factors]
    objective = float(np.prod([p.objective for p in parts]))
    lower = _round_down(float(np.prod([p.lower_bound for p in parts])), d)  # products round too
    gap = objective / lower - 1.0 if lower > 0 else math.inf
    statuses = {p.status for p in parts}
    status = "converged" if statuses == {"converged"} else sorted(statuses - {"converged"})[0]
    factors = tuple(p.strategy for p in parts)
    if wl.domain_size <= _DENSE_PRODUCT_LIMIT:
        dense: FloatArray = np.ones((1, 1))
        for A in factors:
            dense = np.asarray(np.kron(dense, A), dtype=np.float64)
    else:
        dense = np.zeros((0, wl.domain_size))
    keep = 1.0
    for p in parts:
        keep *= 1.0 - p.bias
    if warn and method != "paper" and status != "converged":
        import warnings

        warnings.warn(
            f"optimize_strategy({method!r}) on a product workload stopped with status {status!r} at "
            f"certified gap {gap:.2e} (tol {tol:.1e})",
            ConvergenceWarning,
            stacklevel=3,
        )
    return StrategyResult(
        strategy=dense,
        objective=objective,
        lower_bound=lower,
        dual_bound=float(np.prod([p.dual_bound for p in parts])),
        svd_bound=float(np.prod([p.svd_bound for p in parts])),
        gap=float(gap),
        method=method,
        status=status,
        n_iter=sum(p.n_iter for p in parts),
        cpu_seconds=sum(p.cpu_seconds for p in parts),
        wall_seconds=sum(p.wall_seconds for p in parts),
        history=tuple({"factor": i, **h} for i, p in enumerate(parts) for h in p.history),
        workload_fingerprint=wl.fingerprint(),
        bias=float(1.0 - keep),
        params={"tol": tol, "tol_per_factor": tol_i},
        factors=factors,
    )


def residual_projector(dims: tuple[int, ...], T: tuple[int, ...]) -> list[FloatArray]:
    """Per-attribute factors of ``Q_T = ⊗_{i∈T} (I - J/n_i) ⊗_{i∉T} J/n_i``."""
    mats = []
    for i, d in enumerate(dims):
        P0 = np.full((d, d), 1.0 / d)
        mats.append(np.eye(d) - P0 if i in T else P0)
    return mats


def _optimize_marginals(wl: Marginals, *, method: str) -> StrategyResult:
    """Closed-form optimum for marginal workloads (residual basis).

    V = Σ_T λ_T Q_T with orthogonal projectors Q_T of rank d_T.  The problem is invariant under
    permutations of each attribute's values, so an optimal X is ``Σ_T x_T Q_T``; its diagonal is
    constant ``Σ_T x_T d_T / N`` and ``f(X) = Σ_T λ_T d_T / x_T``, minimized by
    ``x_T ∝ sqrt(λ_T)``: ``f* = (Σ_T d_T sqrt(λ_T))² / N = ‖W‖_*²/N`` -- the SVD lower bound, so
    the certified gap is 0.
    """
    t0, w0 = time.process_time(), time.perf_counter()
    spectrum = wl.residual_spectrum()
    N = wl.domain_size
    total = sum(d * math.sqrt(lam) for _, lam, d in spectrum)
    terms = tuple((T, N * math.sqrt(lam) / total) for T, lam, _ in spectrum)
    objective = total**2 / N
    if N <= _DENSE_MARGINALS_LIMIT:
        A = np.zeros((N, N))
        for T, x in terms:
            Q: FloatArray = np.ones((1, 1))
            for M in residual_projector(wl.dims, T):
                Q = np.asarray(np.kron(Q, M), dtype=np.float64)
            A += math.sqrt(x) * Q
    else:
        A = _empty_strategy(N)
    return StrategyResult(
        strategy=A,
        objective=float(objective),
        lower_bound=float(objective),
        dual_bound=float(objective),
        svd_bound=float(objective),
        gap=0.0,
        method=method,
        status="converged",
        n_iter=0,
        cpu_seconds=time.process_time() - t0,
        wall_seconds=time.perf_counter() - w0,
        workload_fingerprint=wl.fingerprint(),
        params={"closed_form": "residual basis"},
        residual_terms=terms,
        domain_shape=tuple(wl.dims),
    )


def evaluate_strategy(
    workload: Workload | ArrayLike, strategy: ArrayLike, *, name: str = "given", certify: bool = True
) -> StrategyResult:
    """Wrap a given strategy matrix (a baseline) as a :class:`StrategyResult` with exact error.

    The strategy is rescaled to unit maximal column norm (the objective is scale invariant).
    With ``certify`` the SVD lower bound is computed, so ``gap`` says how far the strategy is
    from the best possible one.
    """
    wl = _check_workload(workload)
    A = np.array(as_float_array(strategy, "strategy", finite=False))
    if A.ndim != 2 or A.shape[1] != wl.domain_size:
        raise InvalidParameterError(
            f"strategy: expected a matrix with {wl.domain_size} columns (the domain size), got shape {A.shape}"
        )
    if not np.all(np.isfinite(A)):
        raise InvalidParameterError("strategy: contains NaN or infinite entries")
    col = float(np.max(np.sum(A**2, axis=0)))
    if col <= 0:
        raise InvalidParameterError("strategy: all columns are zero")
    A /= math.sqrt(col)
    t0, w0 = time.process_time(), time.perf_counter()
    V = wl.gram()
    with _blas_threads(max(A.shape)):
        objective, bias = strategy_error(A, V)
        svd = svd_lower_bound(V) if certify else math.nan
    params: dict[str, Any] = {}
    if certify and svd > objective:  # rounding in the objective only: lower the bound, say so
        params["lower_bound_lowered_by"] = float((svd - objective) / objective)
        svd = objective
    gap = (objective - svd) / svd if certify and svd > 0 else math.nan
    return StrategyResult(
        strategy=A,
        objective=objective,
        lower_bound=svd,
        dual_bound=math.nan,
        svd_bound=svd,
        gap=gap,
        method=name,
        status="completed",
        n_iter=0,
        cpu_seconds=time.process_time() - t0,
        wall_seconds=time.perf_counter() - w0,
        workload_fingerprint=wl.fingerprint(),
        bias=bias,
        params=params,
    )
