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

import math
import os
import time
from pathlib import Path
from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike

from dpopt._validation import as_float_array, check_nonneg, check_positive
from dpopt.exceptions import ConvergenceWarning, InvalidParameterError
from dpopt.iteration import Callback
from dpopt.linear_queries._certificates import (
    dual_lower_bound,
    factor_dual_bound,  # noqa: F401
    round_down,
    strategy_error,
    svd_lower_bound,
    tridiagonal_dual_bound,  # noqa: F401
)
from dpopt.linear_queries._certificates import gram_norm_bound as _gram_norm_bound  # noqa: F401
from dpopt.linear_queries._certificates import tridiagonal_inverse as _tridiagonal_inverse  # noqa: F401
from dpopt.linear_queries._coa_newton import (
    COAParams,
    coa_gradient,
    coa_hessian_vector,
    coa_objective,
    modified_cg,
)
from dpopt.linear_queries._dual_fixed_point import DualEvaluator as _DualEvaluator  # noqa: F401
from dpopt.linear_queries._optimizer import (
    blas_threads,
    check_workload,
    estimate_memory,
    estimate_seconds_per_iteration,
    optimize_dense,
)
from dpopt.linear_queries._optimizer import blas_threads as _blas_threads  # noqa: F401
from dpopt.linear_queries._optimizer import column_classes as _column_classes  # noqa: F401
from dpopt.linear_queries._result import FloatArray, StrategyResult, empty_strategy
from dpopt.linear_queries.union import is_union_of_products, optimize_union
from dpopt.linear_queries.workloads import Kronecker, Marginals, Workload

# The lines marked noqa: F401 keep importable from here what other modules and the tests imported
# before this module was split (factor_dual_bound, tridiagonal_dual_bound and five private names).
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

Method = Literal["dual", "paper", "newton"]


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
    wl = check_workload(workload)
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
    return optimize_dense(
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


_DENSE_PRODUCT_LIMIT = 4096
_DENSE_MARGINALS_LIMIT = 0  # the closed form's strategy is implicit (plan_from_result(...).dense_matrix())


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
    lower = round_down(float(np.prod([p.lower_bound for p in parts])), d)  # products round too
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
        A = empty_strategy(N)
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
    wl = check_workload(workload)
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
    with blas_threads(max(A.shape)):
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
