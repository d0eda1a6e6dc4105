"""COA's primal method (seeds 000/001, spec A.3-A.6): derivatives, the corrected CG and damped Newton.

``F(X) = <X⁻¹, V>`` with its gradient and Hessian action, Algorithm 2 (the corrected modified CG
on zero-diagonal directions), the constants of Algorithms 1-3 (:class:`COAParams`) and
Algorithm 1 itself (:func:`primal_newton`: damped Newton, Armijo line search, Cholesky
positive-definiteness test), used by the ``"paper"`` and ``"newton"`` methods.  Import the public
names from :mod:`dpopt.linear_queries.strategy`, where they are documented.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.linalg as sla
from numpy.typing import ArrayLike

from dpopt.exceptions import InvalidParameterError
from dpopt.linear_queries._certificates import dual_lower_bound, sym
from dpopt.linear_queries._result import FloatArray, IterateCallback

__all__ = [
    "COAParams",
    "chol_inverse",
    "coa_gradient",
    "coa_hessian_vector",
    "coa_objective",
    "modified_cg",
    "primal_newton",
    "strategy_from_X",
]


def chol_inverse(X: FloatArray) -> FloatArray | None:
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
    Z = chol_inverse(np.asarray(X, dtype=np.float64))
    if Z is None:
        raise InvalidParameterError("X: must be symmetric positive definite")
    return float(np.sum(Z * np.asarray(V, dtype=np.float64)))


def coa_gradient(X: ArrayLike, V: ArrayLike) -> FloatArray:
    """``G(X) = -X⁻¹ V X⁻¹``."""
    Z = chol_inverse(np.asarray(X, dtype=np.float64))
    if Z is None:
        raise InvalidParameterError("X: must be symmetric positive definite")
    return sym(-(Z @ np.asarray(V, dtype=np.float64) @ Z))


def _hvp(Z: FloatArray, G: FloatArray, D: FloatArray) -> FloatArray:
    K = Z @ D @ G
    return -(K + K.T)


def coa_hessian_vector(X: ArrayLike, V: ArrayLike, D: ArrayLike) -> FloatArray:
    """Hessian action ``H_X[D] = -Z D G - G D Z`` for symmetric D (Z = X⁻¹, G = G(X))."""
    Xa = np.asarray(X, dtype=np.float64)
    Z = chol_inverse(Xa)
    if Z is None:
        raise InvalidParameterError("X: must be symmetric positive definite")
    G = sym(-(Z @ np.asarray(V, dtype=np.float64) @ Z))
    return _hvp(Z, G, sym(np.asarray(D, dtype=np.float64)))


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
    return sym(D), passes


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


def primal_newton(
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
    callback: IterateCallback | None,
    max_time: float | None,
    t0: float,
    k0: int = 0,
) -> tuple[FloatArray, str, int, float]:
    """Algorithm 1 (damped Newton, Armijo, Cholesky PD test).  Returns (X, status, iters, best LB)."""
    X = X0
    Z = chol_inverse(X)
    if Z is None:
        raise InvalidParameterError("X0: the starting point must be positive definite")
    F = float(np.sum(Z * V_reg))
    G = sym(-(Z @ V_reg @ Z))
    status = "max_iter"
    best_lb = -math.inf
    k = 0
    for k in range(1, params.max_iter + 1):
        pg = float(np.linalg.norm(_p0(G)))
        if k == 1 and first_gradient:
            D, passes = sym(_p0(-G)), 0
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
            Xt = sym(X + alpha * D)
            Zt = chol_inverse(Xt)
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
        G = sym(-(Z @ V_reg @ Z))
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
        if callback is not None and callback(dict(rec), strategy_from_X(X)):
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


def strategy_from_X(X: FloatArray) -> FloatArray:
    """Upper Cholesky factor R (RᵀR = X), as the listing's ``A = chol(X)``."""
    return np.asarray(sla.cholesky(X, lower=False))
