"""Objective perturbation (Algorithm 2 of Talwar-Thakurta-Zhang, seed 002; Kifer-Smith-Thakurta 2012).

Release ``argmin_{θ∈C} F(θ; D) + (ζ/2)‖θ - θ₀‖² + <b, θ>`` with Gaussian ``b``.  The minimiser is
computed by accelerated projected gradient (FISTA with adaptive restart) to a gradient-mapping norm
of ``tol`` (privacy needs the exact minimiser; the achieved residual is reported).
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np
from numpy.typing import NDArray

from dpopt._validation import check_int, check_positive
from dpopt.accounting import Accountant, EpsilonDeltaEvent, PrivacyEvent
from dpopt.exceptions import ConvergenceWarning, InvalidParameterError
from dpopt.mechanisms import gaussian_noise
from dpopt.problems import ERMProblem
from dpopt.randomness import RNGLike, check_rng
from dpopt.solvers._result import OptimizeResult, Status
from dpopt.solvers.minimize import (
    BudgetLike,
    check_accountant,
    check_calibration,
    commit_privacy,
    nonprivate_diagnostics,
    parse_budget,
)

__all__ = [
    "kst_sigma",
    "private_objective_perturbation",
    "replace_one_calibration",
    "replace_one_epsilon",
]

Array = NDArray[np.float64]


def kst_sigma(lipschitz: float, n: int, epsilon: float, delta: float) -> float:
    """KST's noise standard deviation for the average-loss objective: ``L sqrt(8 log(2/δ) + 4ε)/(nε)``."""
    return lipschitz * math.sqrt(8 * math.log(2 / delta) + 4 * epsilon) / (n * epsilon)


def replace_one_epsilon(
    sigma: float, regularization: float, *, lipschitz: float, hessian: float, n: int, delta: float
) -> float:
    """ε (at ``delta``) that the replace-one analysis certifies for objective perturbation.

    For GLM losses (rank-one per-example Hessians ``φ''xxᵀ`` with ``φ''‖x‖² <= hessian``) and a total
    ridge ``ζ = regularization`` (added regulariser plus public l2 penalty), the density ratio of the
    output between neighbours ``D = S+{d}`` and ``D' = S+{d'}`` is the Jacobian ratio, at most
    ``1 + hessian/(nζ)``, times the noise-density ratio ``exp((2<b, u> + ‖u‖²)/(2σ²))`` with
    ``u = (∇ℓ(θ; d) - ∇ℓ(θ; d'))/n``: ``‖u‖ <= Δ = 2L/n`` and u lies in span{x, x'}, so
    ``<b, u> <= Δ‖P b‖`` with ``‖P b‖/σ ~ χ₂`` and ``P(χ₂ > t) = exp(-t²/2)``.  Hence
    ``ε = ln(1 + hessian/(nζ)) + t/z + 1/(2z²)`` with ``z = σ/Δ`` and ``t = sqrt(2 ln(1/δ))``.
    """
    if regularization <= 0 or sigma <= 0:
        return math.inf
    eps1 = math.log1p(hessian / (n * regularization))
    z = sigma / (2 * lipschitz / n)
    t = math.sqrt(2 * math.log(1 / delta))
    return eps1 + t / z + 1 / (2 * z * z)


def replace_one_calibration(
    epsilon: float, delta: float, *, lipschitz: float, hessian: float, n: int, jacobian_fraction: float
) -> tuple[float, float]:
    """(σ, total ridge ζ) meeting (ε, δ) under :func:`replace_one_epsilon`.

    ``jacobian_fraction`` of ε goes to the Jacobian term (ζ = hessian/(n(e^{ε₁} - 1))), the rest to
    the noise: ``z = (t + sqrt(t² + 2ε₂))/(2ε₂)``, ``σ = z·2L/n``.
    """
    eps1 = jacobian_fraction * epsilon
    eps2 = epsilon - eps1
    zeta = hessian / (n * math.expm1(eps1))
    t = math.sqrt(2 * math.log(1 / delta))
    z = (t + math.sqrt(t * t + 2 * eps2)) / (2 * eps2)
    return z * 2 * lipschitz / n, zeta


def fista(
    fun: Any,
    grad_fn: Any,
    project: Any,
    x0: Array,
    lipschitz: float,
    *,
    tol: float,
    max_iterations: int,
) -> tuple[Array, int, float, bool]:
    """Accelerated projected gradient with backtracking and gradient-based adaptive restart.

    ``lipschitz`` is an upper bound on the smoothness (the declared worst case); the step starts
    at 1024/lipschitz and is halved by Beck-Teboulle backtracking until the sufficient-decrease
    test holds (the actual curvature is usually much smaller than the declared bound).  Returns
    (x, iterations, gradient-mapping norm at x, converged).
    """
    lip_est = lipschitz / 1024
    x = project(x0)
    yk, t = x.copy(), 1.0
    res = math.inf
    for it in range(1, max_iterations + 1):
        fy, gy = fun(yk), grad_fn(yk)
        while True:
            x_new = project(yk - gy / lip_est)
            d = x_new - yk
            dd = float(d @ d)
            if lip_est >= lipschitz or dd == 0.0:
                break
            if fun(x_new) <= fy + float(gy @ d) + 0.5 * lip_est * dd:
                break
            lip_est = min(2 * lip_est, lipschitz)
        res = float(np.linalg.norm(d)) * lip_est
        if res <= tol:
            return x_new, it, res, True
        t_new = (1 + math.sqrt(1 + 4 * t * t)) / 2
        if float(np.dot(gy, x_new - x)) > 0:  # restart momentum
            t_new, yk = 1.0, x_new.copy()
        else:
            yk = x_new + ((t - 1) / t_new) * (x_new - x)
        x, t = x_new, t_new
    return x, max_iterations, res, False


def private_objective_perturbation(
    problem: ERMProblem,
    X: Any,
    y: Any,
    *,
    budget: BudgetLike,
    rng: RNGLike,
    calibration: str = "tight",
    accountant: Accountant | None = None,
    diagnostics: bool = False,
    center: Array | None = None,
    tol: float = 1e-10,
    max_iterations: int = 50_000,
    jacobian_fraction: float = 0.1,
) -> OptimizeResult:
    """Objective perturbation ([TTZ] Algorithm 2; Kifer-Smith-Thakurta 2012).

    Parameters
    ----------
    problem : ERMProblem
        Smooth (twice-differentiable) GLM loss: ``"logistic"``, ``"squared"``, ``"smooth_hinge"``.
        ``constraint=None`` means unconstrained.
    X, y
        Private data.
    budget, rng, accountant, diagnostics
        See :func:`dpopt.solvers.minimize`.
    calibration : {"tight", "kst", "paper"}, default "tight"
        ``"tight"``: the replace-one calibration below (sound by the stated argument).  ``"kst"``:
        KST's constants; ``"paper"``: [TTZ]'s smaller noise.  Both warn when the replace-one
        analysis cannot certify the budget, and ``result.privacy.true_epsilon`` is the ε it does
        certify.
    center : array, optional
        θ₀ of the added regulariser (default: the constraint set's centre, or 0).
    tol : float, default 1e-10
        Stop when the gradient-mapping norm is at most ``tol``.
    max_iterations : int, default 50000
        Cap on the inner solver; if reached, a ConvergenceWarning says the privacy proof (which needs
        the exact minimiser) does not strictly apply and the status is ``"max_iterations"``.
    jacobian_fraction : float, default 0.1
        Share of ε spent on the Jacobian term ("tight" only): larger means less added
        regularisation and more noise.

    Returns
    -------
    OptimizeResult
        ``iterations`` is 1 (one perturbed minimisation); the inner solver's iteration count and
        residual depend on the data and are only in ``nonprivate_diagnostics``.  ``status`` reports
        whether the inner solve met ``tol`` (a numerical property the proof requires).

    Privacy
    -------
    (ε, δ)-DP under **replace-one** neighbours for GLM losses with declared bounds, provided the
    minimiser is exact (the inner solver runs to ``tol``).  With L = ``problem.lipschitz("l2")``
    and λ = ``problem.smoothness()`` (both from the declared bounds), the output density ratio
    between neighbours is at most ``(1 + λ/(nζ))·exp((2<b, u> + ‖u‖²)/(2σ²))`` where ζ is the total
    ridge (added regulariser + ``l2_penalty``) and ``u`` (‖u‖ <= 2L/n) lies in the span of the two
    differing records; a χ₂ tail bound on the projected noise gives
    ``ε = ln(1 + λ/(nζ)) + t/z + 1/(2z²)``, ``z = σn/(2L)``, ``t = sqrt(2 ln(1/δ))``
    (:func:`replace_one_epsilon`).  ``"tight"`` splits ε as ``jacobian_fraction`` : rest and solves
    for ζ and σ (:func:`replace_one_calibration`).  KST's constants (ζ = 2λ/(nε),
    ``σ = L sqrt(8 log(2/δ) + 4ε)/(nε)``) correspond to a gradient difference of L/n (one record
    added or removed); under replace-one this analysis certifies a larger ε, and [TTZ]'s
    ``σ² = 2L² log(1/δ)/(nε)²`` is smaller still.  For a constraint set the argument follows KST's
    extension to convex domains.  The run is recorded as one (ε, δ) event.
    """
    if not isinstance(problem, ERMProblem):
        raise InvalidParameterError("problem: expected a dpopt.problems.ERMProblem")
    loss = problem.loss
    assert not isinstance(loss, str)
    if not loss.smooth:
        raise InvalidParameterError("objective perturbation needs a twice-differentiable loss")
    calibration = check_calibration(calibration, ("tight", "kst", "paper"))
    bud = parse_budget(budget)
    acct = check_accountant(accountant)
    tol = check_positive(tol, "tol")
    if not 0 < check_positive(jacobian_fraction, "jacobian_fraction") < 1:
        raise InvalidParameterError("jacobian_fraction: must lie in (0, 1)")
    max_iterations = check_int(max_iterations, "max_iterations")
    Xc, yc = problem.prepare(X, y)
    n, p = Xc.shape
    C = problem.constraint
    L2 = problem.lipschitz("l2", dim=p)
    hess = problem.smoothness(dim=p)
    theta0 = (
        np.asarray(center, dtype=float)
        if center is not None
        else (C.center() if C is not None else np.zeros(p))
    )
    if theta0.shape != (p,):
        raise InvalidParameterError(f"center: expected shape ({p},)")

    event: PrivacyEvent | None = None
    zeta, sigma = 0.0, 0.0
    if bud is not None:
        if bud.delta <= 0:
            raise InvalidParameterError("objective perturbation with Gaussian noise needs δ > 0")
        if calibration == "tight":
            sigma, ridge = replace_one_calibration(
                bud.epsilon, bud.delta, lipschitz=L2, hessian=hess, n=n, jacobian_fraction=jacobian_fraction
            )
            zeta = max(ridge - problem.l2_penalty, 0.0)
            event = EpsilonDeltaEvent(bud.epsilon, bud.delta, rule="objective-perturbation-replace-one")
        else:
            zeta = max(2 * hess / (n * bud.epsilon) - problem.l2_penalty, 0.0)
            if calibration == "paper":
                sigma = L2 * math.sqrt(2 * math.log(1 / bud.delta)) / (n * bud.epsilon)
            else:
                sigma = kst_sigma(L2, n, bud.epsilon, bud.delta)
            true_eps = replace_one_epsilon(
                sigma, zeta + problem.l2_penalty, lipschitz=L2, hessian=hess, n=n, delta=bud.delta
            )
            source = EpsilonDeltaEvent(max(true_eps, bud.epsilon), bud.delta, rule="replace-one-analysis")
            event = EpsilonDeltaEvent(
                bud.epsilon, bud.delta, source=source, rule=f"{calibration}-objective-perturbation"
            )

    privacy = commit_privacy(
        event,
        budget=bud,
        kind="pld" if calibration == "tight" else "advanced",
        accountant=acct,
        label="objective-perturbation",
    )
    gen = check_rng(rng)
    b = gaussian_noise(sigma, p, rng=gen) if sigma > 0 else np.zeros(p)

    def fun(theta: Array) -> float:
        d = theta - theta0
        return problem.objective(theta, Xc, yc) + 0.5 * zeta * float(d @ d) + float(b @ theta)

    def grad(theta: Array) -> Array:
        return problem.gradient(theta, Xc, yc) + zeta * (theta - theta0) + b

    project = C.project if C is not None else (lambda v: v)
    beta = hess + problem.l2_penalty + zeta
    theta, its, res, ok = fista(fun, grad, project, theta0, beta, tol=tol, max_iterations=max_iterations)
    status: Status = "converged" if ok else "max_iterations"
    if not ok:
        warnings.warn(
            f"objective perturbation: the inner solver stopped after {its} iterations with gradient-mapping "
            f"norm {res:.3g} > tol={tol:g}; the privacy proof assumes the exact minimiser. Increase "
            "max_iterations or tol",
            ConvergenceWarning,
            stacklevel=2,
        )
    params = {
        "regularization": zeta,
        "sigma": sigma,
        "lipschitz_l2": L2,
        "hessian_bound": hess,
        "inner_tol": tol,
        "n_samples": n,
    }
    diag: dict[str, Any] = {}
    if diagnostics:
        diag = {"inner_iterations": its, "inner_residual": res}
        diag.update(nonprivate_diagnostics(problem, theta, Xc, yc))
    return OptimizeResult(
        solution=theta,
        privacy=privacy,
        status=status,
        iterations=1,
        method="objective_perturbation",
        calibration=calibration if bud is not None else "none",
        parameters=params,
        message="exact minimiser of the perturbed objective" if ok else "inner solver did not converge",
        nonprivate_diagnostics=diag,
    )
