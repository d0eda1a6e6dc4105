"""Certified lower bounds on the COA objective, rigorous in floating point, and exact strategy error.

Every bound here is <= the exact value for the inputs as given: eigenvalues and singular values
carry a backward-stability error allowance, and sums and products are rounded down
(:func:`round_down`).  Import the public functions from :mod:`dpopt.linear_queries.strategy`,
where they are documented.
"""

from __future__ import annotations

import math

import numpy as np
import scipy.linalg as sla
from numpy.typing import ArrayLike, NDArray

from dpopt.exceptions import InvalidParameterError
from dpopt.linear_queries._result import FloatArray
from dpopt.linear_queries.workloads import Workload

__all__ = [
    "EPS",
    "dual_lower_bound",
    "eig_null_threshold",
    "factor_dual_bound",
    "gram_norm_bound",
    "round_down",
    "sqrt_trace_lower",
    "strategy_error",
    "svd_lower_bound",
    "sym",
    "tridiagonal_dual_bound",
    "tridiagonal_inverse",
]


def sym(A: FloatArray) -> FloatArray:
    return (A + A.T) / 2


EPS = float(np.finfo(np.float64).eps)


def round_down(x: float, ops: int) -> float:
    """``x >= 0`` lowered by ``ops`` relative roundings (and one more for this product): a float <= the
    exact value of a quantity computed from exact inputs in ``ops`` correctly rounded operations."""
    return x * (1.0 - 2.0 * (ops + 1) * EPS) if x > 0 else x


def eig_null_threshold(B: FloatArray) -> float:
    """Rigorous bound on the eigenvalue error of ``eigh`` on ``B`` (n x n, entries rounded once).

    LAPACK's symmetric eigensolvers are backward stable: the computed eigenvalues are the exact
    eigenvalues of ``B + E`` with ``‖E‖₂ <= p(n)·eps·‖B‖₂`` (LAPACK Users' Guide §4.7, ``p(n)`` a
    modest function of n, taken here as n), and by Weyl's inequality every computed eigenvalue is
    within ``‖E‖₂`` of the true one.  Adding ``2 eps ‖B‖_F`` for the rounding of ``B``'s entries and
    bounding ``‖B‖₂ <= ‖B‖_F`` (itself rounded up) gives ``τ = 2 (n + 2) eps ‖B‖_F``.
    """
    n = B.shape[0]
    norm_f = float(np.linalg.norm(B)) * (1.0 + (n * n + 2) * EPS)
    return 2.0 * (n + 2) * EPS * norm_f


def sqrt_trace_lower(lam: FloatArray, tau: float) -> float:
    """Rigorous lower bound on ``Σ sqrt(λ_i)`` from computed eigenvalues ``lam`` with error <= ``tau``.

    Every true eigenvalue is >= ``max(λ̂_i - τ, 0)`` (and >= 0 for a PSD matrix); ``sqrt`` is
    monotone, so the sum of the square roots of these floors is a lower bound.  Null eigenvalues
    below ``τ`` (rounding noise, which clipping at 0 would turn into ``sqrt(noise)`` terms and an
    inflated bound) count as zero.  The subtraction, square roots and the (``math.fsum``, correctly
    rounded) sum are rounded down afterwards.
    """
    floors = np.sqrt(np.clip(np.asarray(lam, dtype=np.float64) - tau, 0.0, None))
    return round_down(math.fsum(floors.tolist()), 3)


def _certified_bound(B: FloatArray, denominator: float) -> float:
    """``(Σ sqrt λ_i(B))² / denominator`` rounded down, with the null-eigenvalue threshold of ``B``."""
    lam = sla.eigh(B, eigvals_only=True, driver="evd")
    root = sqrt_trace_lower(lam, eig_null_threshold(B))
    return round_down(root * root / denominator, 2)


def svd_lower_bound(V: ArrayLike) -> float:
    """``tr(V^½)²/n = ‖W‖_*²/n``: no strategy with unit column norms does better (Lemma 4).

    Certified in floating point: eigenvalues of ``V`` within the solver's error bound of zero
    count as zero and the rest are lowered by that bound (:func:`sqrt_trace_lower`), so the
    result is <= the exact value for the Gram matrix ``V`` as given.
    """
    Va = np.asarray(V, dtype=np.float64)
    return _certified_bound(sym(Va), float(Va.shape[0]))


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
    ysum = math.fsum(ya.tolist()) * (1.0 + 4.0 * EPS)
    return _certified_bound(sym(s[:, None] * Va * s[None, :]), ysum)


def _singular_sum_lower(G: FloatArray) -> float:
    """Rigorous lower bound on the sum of the singular values of ``G`` (entries rounded once).

    Backward stability of the SVD and Weyl's inequality for singular values bound every computed
    singular value's error by ``p(m, n) eps ‖G‖₂`` (taken as ``2 (m + n + 2) eps ‖G‖_F`` as in
    :func:`eig_null_threshold`, which also covers the rounding of ``G``'s entries).  Unlike the
    eigenvalues of ``GᵀG``, whose error allowance enters ``tr (GᵀG)^½`` through a square root,
    the allowance here is absolute on each term.
    """
    tau = 2.0 * (sum(G.shape) + 2) * EPS * float(np.linalg.norm(G)) * (1 + (G.size + 2) * EPS)
    sig = sla.svd(G, compute_uv=False, lapack_driver="gesdd", check_finite=False)
    return round_down(math.fsum(np.clip(sig - tau, 0.0, None).tolist()), 3)


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
    ysum = math.fsum((s * s).tolist()) * (1.0 + 4.0 * EPS)
    return round_down(root * root / ysum, 2)


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


def tridiagonal_inverse(wl: Workload, n: int) -> tuple[FloatArray, FloatArray] | None:
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


def gram_norm_bound(wl: Workload, n: int) -> float | None:
    """Upper bound on ``‖V‖₂`` (the largest row sum of V, in closed form) for prefix and all-range."""
    from dpopt.linear_queries.workloads import AllRange, Prefix

    j = np.arange(n, dtype=np.float64)  # integer-valued sums below are exact up to 2^53
    if isinstance(wl, Prefix):  # row j: Σ_k n - max(j, k)
        rows = j * (n - j) + (n - j) * (n - j + 1) / 2
    elif isinstance(wl, AllRange):  # row j: Σ_k (min(j, k) + 1)(n - max(j, k))
        rows = (n - j) * j * (j + 1) / 2 + (j + 1) * (n - j) * (n - j + 1) / 2
    else:
        return None
    return float(rows.max()) * (1.0 + 8.0 * EPS)


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
    delta = 16.0 * EPS * norm + 2.0 * pivmin
    # relative start (MRRR's eigenvalues of this positive definite T are relatively accurate);
    # the Sturm counts below verify it and widen it where they fail
    slack = np.maximum(8.0 * EPS * np.abs(mu), (4.0 * EPS * norm) if gram_norm is None else 4.0 * pivmin)
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
    upper = (u + delta) * (1.0 + 2.0 * EPS)  # μ_i(T) <= u_i + Δ, rounded up
    if gram_norm is not None and gram_norm > 0:
        inv_norm = float(
            np.max(np.abs(da) + np.abs(np.concatenate([[0.0], ea])) + np.abs(np.concatenate([ea, [0.0]])))
        )
        eta = 16.0 * EPS * inv_norm * (1.0 + 4.0 * EPS) * float(gram_norm)
        if eta < 0.5:  # μ_i <= (u_i + 2 pivmin)(1 + 16 eps) / (1 - η), rounded up
            rel = (u + 2.0 * pivmin) * (1.0 + 16.0 * EPS) / (1.0 - eta) * (1.0 + 4.0 * EPS)
            upper = np.minimum(upper, rel)
    root = round_down(math.fsum((1.0 / np.sqrt(upper)).tolist()), 3)
    ysum = math.fsum((s * s).tolist()) * (1.0 + 4.0 * EPS)
    return round_down(root * root / ysum, 2)
