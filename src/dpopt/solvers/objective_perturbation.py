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
from scipy import optimize, special

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
    "chi2_delta",
    "kst_sigma",
    "private_objective_perturbation",
    "replace_one_calibration",
    "replace_one_epsilon",
]

Array = NDArray[np.float64]


def kst_sigma(lipschitz: float, n: int, epsilon: float, delta: float) -> float:
    """KST's noise standard deviation for the average-loss objective: ``L sqrt(8 log(2/δ) + 4ε)/(nε)``."""
    return lipschitz * math.sqrt(8 * math.log(2 / delta) + 4 * epsilon) / (n * epsilon)


def chi2_delta(z: float, eps2: float) -> float:
    """δ certified at ``eps2`` for the noise part of the replace-one analysis with multiplier ``z``.

    The privacy loss of the noise-density ratio is at most ``R/z + 1/(2z²)`` with ``R = ‖P b‖/σ``
    stochastically below a χ₂ variable (see :func:`replace_one_epsilon`), so
    ``δ <= E[(1 - exp(eps2 - R/z - 1/(2z²)))₊]``, which integrates in closed form to
    ``exp(-r₀²/2) - exp(eps2)·(exp(-u₀²/2) - sqrt(2π)/z·Q(u₀))`` with
    ``r₀ = max(z·eps2 - 1/(2z), 0)``, ``u₀ = r₀ + 1/z`` and Q the standard normal tail.
    """
    if z <= 0:
        return 1.0
    r0 = max(z * eps2 - 1 / (2 * z), 0.0)
    u0 = r0 + 1 / z
    # in log space: exp(eps2) alone overflows for large ε
    tail = math.sqrt(2 * math.pi) / z * math.exp(eps2 + float(special.log_ndtr(-u0)))
    val = math.exp(-r0 * r0 / 2) - math.exp(eps2 - u0 * u0 / 2) + tail
    return min(max(val, 0.0), 1.0)


def _noise_epsilon(z: float, delta: float) -> float:
    """Smallest ε₂ with ``chi2_delta(z, ε₂) <= delta``."""
    t = math.sqrt(2 * math.log(1 / delta))
    hi = t / z + 1 / (2 * z * z)  # the χ₂ tail bound P(R > t) = δ certifies this much
    if chi2_delta(z, 0.0) <= delta:
        return 0.0
    return float(optimize.brentq(lambda e: chi2_delta(z, e) - delta, 0.0, hi, xtol=1e-15, rtol=1e-15))


def _noise_multiplier(eps2: float, delta: float) -> float:
    """Smallest z with ``chi2_delta(z, eps2) <= delta``."""
    t = math.sqrt(2 * math.log(1 / delta))
    hi = (t + math.sqrt(t * t + 2 * eps2)) / (2 * eps2)  # the χ₂ tail-bound calibration
    return float(optimize.brentq(lambda z: chi2_delta(z, eps2) - delta, 1e-6, hi, xtol=1e-15, rtol=1e-15))


def replace_one_epsilon(
    sigma: float, regularization: float, *, lipschitz: float, hessian: float, n: int, delta: float
) -> float:
    """ε (at ``delta``) that the replace-one analysis certifies for objective perturbation.

    For GLM losses (rank-one per-example Hessians ``φ''xxᵀ`` with ``φ''‖x‖² <= hessian``) and a total
    ridge ``ζ = regularization`` (added regulariser plus public l2 penalty), the privacy loss at an
    output between neighbours ``D = S+{d}`` and ``D' = S+{d'}`` is the log Jacobian ratio, at most
    ``ε₁ = ln(1 + hessian/(nζ))``, plus the log noise-density ratio ``(2<b, u> + ‖u‖²)/(2σ²)`` with
    ``u = (∇ℓ(θ; d) - ∇ℓ(θ; d'))/n``: ``‖u‖ <= Δ = 2L/n`` and u lies in span{x, x'} (whatever θ),
    so ``<b, u> <= Δ‖P b‖`` with ``R = ‖P b‖/σ`` a χ₁ or χ₂ variable when the output is drawn under
    D (b is then exactly the Gaussian noise).  The loss is thus at most ``ε₁ + R/z + 1/(2z²)``
    (``z = σ/Δ``), a non-decreasing function of R, and the hockey-stick divergence at ε₁ + ε₂ is at
    most ``E[(1 - exp(ε₂ - R/z - 1/(2z²)))₊]`` with R ~ χ₂ (:func:`chi2_delta`).  The returned ε is
    ε₁ plus the smallest such ε₂ for ``delta``; it is never larger than the χ₂-tail-bound figure
    ``ε₁ + t/z + 1/(2z²)`` with ``t = sqrt(2 ln(1/δ))``.
    """
    if regularization <= 0 or sigma <= 0:
        return math.inf
    eps1 = math.log1p(hessian / (n * regularization))
    z = sigma / (2 * lipschitz / n)
    return eps1 + _noise_epsilon(z, delta)


def replace_one_calibration(
    epsilon: float,
    delta: float,
    *,
    lipschitz: float,
    hessian: float,
    n: int,
    jacobian_fraction: float,
    l2_penalty: float = 0.0,
) -> tuple[float, float]:
    """(σ, total ridge ζ) meeting (ε, δ) under :func:`replace_one_epsilon`.

    ``jacobian_fraction`` of ε goes to the Jacobian term (ζ = hessian/(n(e^{ε₁} - 1))), the rest to
    the noise (the smallest z with ``chi2_delta(z, ε₂) <= δ``; σ = z·2L/n).  When the public
    ``l2_penalty`` already exceeds that ζ, the ridge is the penalty itself, the Jacobian term only
    needs ``ε₁ = ln(1 + hessian/(n·l2_penalty))`` and the rest of ε goes to the noise.
    """
    eps1 = min(jacobian_fraction * epsilon, 700.0)  # e^{ε₁} overflows beyond; a larger ridge is sound
    zeta = hessian / (n * math.expm1(eps1))
    if l2_penalty > zeta:
        zeta = l2_penalty
        eps1 = math.log1p(hessian / (n * zeta))
    eps2 = epsilon - eps1
    z = _noise_multiplier(eps2, delta)
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
    ``ε = ln(1 + λ/(nζ)) + t/z + 1/(2z²)``, ``z = σn/(2L)``, ``t = sqrt(2 ln(1/δ))``; integrating
    the hockey-stick divergence against the χ₂ law instead (:func:`chi2_delta`) certifies a smaller
    ε at the same δ, which is what :func:`replace_one_epsilon` returns.  ``"tight"`` splits ε as
    ``jacobian_fraction`` : rest (or, when the public ``l2_penalty`` already exceeds the ridge
    that split needs, spends only ``ln(1 + λ/(n·l2_penalty))`` on the Jacobian term) and solves
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
                bud.epsilon,
                bud.delta,
                lipschitz=L2,
                hessian=hess,
                n=n,
                jacobian_fraction=jacobian_fraction,
                l2_penalty=problem.l2_penalty,
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
