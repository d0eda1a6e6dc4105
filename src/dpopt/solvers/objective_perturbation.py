"""Objective perturbation (Algorithm 2 of Talwar-Thakurta-Zhang, seed 002; Kifer-Smith-Thakurta 2012).

Release ``argmin_{θ∈C} F(θ; D) + (ζ/2)‖θ - θ₀‖² + <b, θ>`` with Gaussian ``b``.  The minimiser is
computed by accelerated projected gradient (FISTA with adaptive restart) until a *certified*
gradient-mapping norm of at most ``tol`` (checked with the declared smoothness bound at the point
that is released, not the solver's own estimate); the exact-minimiser proof is then extended to the
computed point by a small extra Gaussian output perturbation (approximate minima perturbation,
Iyengar et al. 2019), and a solve that cannot be certified releases nothing
(:class:`InexactSolveError`).  :func:`certified_minimize` is shared with output perturbation.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray
from scipy import optimize, special

from dpopt._validation import check_int, check_positive
from dpopt.accounting import (
    Accountant,
    Budget,
    EpsilonDeltaEvent,
    PrivacyEvent,
    check_caller_accountant,
    commit,
    gaussian_sigma,
)
from dpopt.exceptions import ConvergenceWarning, Hint, InexactSolveError, InvalidParameterError, Setting
from dpopt.mechanisms import gaussian_noise, l2_laplace_noise
from dpopt.problems import ERMProblem, make_loss
from dpopt.randomness import RNGLike, SecureRNG, check_rng
from dpopt.solvers._result import OptimizeResult, Status
from dpopt.solvers.minimize import (
    BudgetLike,
    check_calibration,
    nonprivate_diagnostics,
    parse_budget,
)

__all__ = [
    "CertifiedSolve",
    "InexactSolveError",
    "certified_minimize",
    "certify_point",
    "chi2_delta",
    "guaranteed_iterations",
    "jacobian_split",
    "kst_sigma",
    "private_objective_perturbation",
    "pure_calibration",
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
    try:
        return float(optimize.brentq(lambda z: chi2_delta(z, eps2) - delta, 1e-6, hi, xtol=1e-15, rtol=1e-15))
    except (ValueError, RuntimeError, ArithmeticError):  # root finder fails at extreme ε (e.g. 1e-300)
        raise InvalidParameterError(
            f"objective perturbation: no noise level found for ε={eps2:.3g}, δ={delta:.3g}; use a larger ε"
        ) from None


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


def jacobian_split(
    epsilon: float, *, hessian: float, n: int, jacobian_fraction: float, l2_penalty: float = 0.0
) -> tuple[float, float]:
    """(ε₂ left for the noise term, total ridge ζ) of objective perturbation's ε split.

    ``jacobian_fraction`` of ε goes to the Jacobian term ``ε₁ = ln(1 + hessian/(nζ))``, which fixes
    ``ζ = hessian/(n(e^{ε₁} - 1))``.  When the public ``l2_penalty`` already exceeds that ζ, the ridge
    is the penalty itself and the Jacobian term needs only ``ln(1 + hessian/(n·l2_penalty))``.  Shared
    by the Gaussian (:func:`replace_one_calibration`) and the pure-ε (:func:`pure_calibration`) forms.
    """
    eps1 = min(jacobian_fraction * epsilon, 700.0)  # e^{ε₁} overflows beyond; a larger ridge is sound
    zeta = hessian / (n * math.expm1(eps1))
    if l2_penalty > zeta:
        zeta = l2_penalty
        eps1 = math.log1p(hessian / (n * zeta))
    return epsilon - eps1, zeta


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
    eps2, zeta = jacobian_split(epsilon, hessian=hessian, n=n, jacobian_fraction=jacobian_fraction,
                                l2_penalty=l2_penalty)  # fmt: skip
    z = _noise_multiplier(eps2, delta)
    return z * 2 * lipschitz / n, zeta


def pure_calibration(
    epsilon: float,
    *,
    lipschitz: float,
    hessian: float,
    n: int,
    jacobian_fraction: float,
    l2_penalty: float = 0.0,
) -> tuple[float, float]:
    """(α, total ridge ζ) of pure ε-DP objective perturbation with l2-Laplace noise ∝ exp(-α‖b‖₂).

    The density ratio of the exact minimiser between replace-one neighbours is at most
    ``(1 + hessian/(nζ))·exp(α‖u‖)`` with ``‖u‖ <= 2L/n`` (Chaudhuri-Monteleoni-Sarwate 2011, the
    noise density's ratio by the triangle inequality), so ``ε = ln(1 + hessian/(nζ)) + 2αL/n``.
    The split of ε is :func:`jacobian_split`'s, as in :func:`replace_one_calibration`.
    """
    eps2, zeta = jacobian_split(epsilon, hessian=hessian, n=n, jacobian_fraction=jacobian_fraction,
                                l2_penalty=l2_penalty)  # fmt: skip
    return eps2 * n / (2 * lipschitz), zeta


@dataclass(frozen=True)
class CertifiedSolve:
    """Outcome of :func:`certified_minimize`.

    Attributes
    ----------
    point
        The point to release (feasible): the certified iterate, or the last iterate if not certified.
    iterations
        Solver iterations used.
    gradient_norm
        Gradient-mapping norm at ``point``'s certificate (computed with the declared smoothness bound).
    distance_bound
        Upper bound on ``‖point − θ*‖₂`` (θ* the exact minimiser) implied by ``gradient_norm``.
    certified
        Whether ``gradient_norm <= tol``.
    """

    point: Array
    iterations: int
    gradient_norm: float
    distance_bound: float
    certified: bool


def certify_point(
    x: Array,
    grad_x: Array,
    project: Callable[[Array], Array] | None,
    smoothness: float,
    strong_convexity: float,
) -> tuple[Array, float, float]:
    """(release point, gradient-mapping norm G, bound on its distance to the exact minimiser).

    For a μ-strongly convex objective J that is β_J-smooth, with ``smoothness`` β >= β_J (declared,
    not estimated):

    * unconstrained (``project is None``): release x itself; ``μ‖x − θ*‖ <= ‖∇J(x) − ∇J(θ*)‖ =
      ‖∇J(x)‖ = G``, so the distance is at most ``G/μ``;
    * over a closed convex set C: release ``x⁺ = P_C(x − ∇J(x)/β)`` with ``G = β‖x − x⁺‖``.  The
      projection's optimality (``<∇J(x) − G, z − x⁺> >= 0`` on C) at ``z = θ*``, plus θ*'s
      (``<∇J(θ*), x⁺ − θ*> >= 0``), give ``μ‖x⁺ − θ*‖² <= <∇J(x⁺) − ∇J(x) + G, x⁺ − θ*>
      <= (β_J/β + 1)·G·‖x⁺ − θ*‖``, so the distance is at most ``2G/μ``.

    The bound is exact arithmetic; gradients are computed in floating point (relative error
    ~1e-16 of the gradient's terms, far below the tolerances used here).
    """
    if project is None:
        g = float(np.linalg.norm(grad_x))
        return np.asarray(x, dtype=float), g, g / strong_convexity
    x_plus = np.asarray(project(x - grad_x / smoothness), dtype=float)
    g = smoothness * float(np.linalg.norm(x - x_plus))
    return x_plus, g, 2.0 * g / strong_convexity


def guaranteed_iterations(
    smoothness: float,
    strong_convexity: float,
    initial_distance: float,
    tol: float,
    *,
    constrained: bool,
) -> int | None:
    """Projected-gradient steps that certify ``tol`` for *every* objective with these constants.

    Projected gradient with step 1/β (β = ``smoothness`` >= the objective's smoothness) on a
    μ-strongly convex objective contracts the distance to the minimiser by ``q = sqrt(1 − μ/β)``
    per step (co-coercivity; projection is non-expansive), so after k steps from x₀ with
    ``‖x₀ − θ*‖ <= D₀`` the certificate of :func:`certify_point` is at most ``c·β·q^k·D₀`` (c = 1
    unconstrained: ``‖∇J(x_k)‖ <= β‖x_k − θ*‖``; c = 2 over a set: ``G = β‖x_k − x_{k+1}‖``).
    Returns the smallest such k (None when a constant is not finite).  Only declared constants
    enter, so the count does not depend on the data.
    """
    beta, mu, d0 = float(smoothness), float(strong_convexity), float(initial_distance)
    if not (math.isfinite(beta) and math.isfinite(d0) and beta > 0 and 0 < mu <= beta):
        return None
    target = (2.0 if constrained else 1.0) * beta * d0 / tol
    if target <= 1.0:
        return 0
    if mu >= beta:
        return 1
    return math.ceil(2.0 * math.log(target) / -math.log1p(-mu / beta))


def _projected_gradient(
    grad_fn: Callable[[Array], Array],
    project: Callable[[Array], Array],
    x0: Array,
    smoothness: float,
    iterations: int,
    stop: Callable[[Array, Array], bool],
) -> tuple[Array, int, bool]:
    """Plain projected gradient (step 1/``smoothness``) from ``x0`` for up to ``iterations`` steps."""
    x = project(x0)
    for k in range(iterations + 1):
        g = grad_fn(x)
        if stop(x, g):
            return x, k, True
        x = project(x - g / smoothness)
    return x, iterations, False


def certified_minimize(
    fun: Callable[[Array], float],
    grad_fn: Callable[[Array], Array],
    project: Callable[[Array], Array] | None,
    x0: Array,
    smoothness: float,
    strong_convexity: float,
    *,
    tol: float,
    max_iterations: int,
    initial_distance: float = math.inf,
) -> CertifiedSolve:
    """Minimise a smooth μ-strongly convex J over C until a certified gradient-mapping norm <= ``tol``.

    Accelerated projected gradient (:func:`fista`) whose stopping test is the certificate of
    :func:`certify_point` at the current extrapolated point, computed with the declared
    ``smoothness`` bound (the solver's backtracked curvature estimate can be smaller than the true
    smoothness, so its own residual does not certify anything).  If it has not certified ``tol``
    within ``max_iterations``, plain projected gradient runs from ``x0`` for the public number of
    steps :func:`guaranteed_iterations` that certifies ``tol`` for every objective with these
    constants (``initial_distance`` bounds ``‖x0 − θ*‖``, from declared quantities), so a failure
    to certify does not depend on the data (it can only come from floating point, or from an
    infinite ``initial_distance``).  The returned point is the one the certificate is about.
    """
    x0 = np.asarray(x0, dtype=float)
    proj = project if project is not None else (lambda v: v)
    best: list[tuple[Array, float, float]] = []

    def stop(y: Array, gy: Array) -> bool:
        point, g, dist = certify_point(y, gy, project, smoothness, strong_convexity)
        if not best or g < best[0][1]:
            best[:] = [(point, g, dist)]
        return g <= tol

    start, its = x0, 0
    if project is None:  # unconstrained: a quasi-Newton warm start (the certificate below is unchanged)
        start, its = _lbfgs_warm_start(fun, grad_fn, x0, tol, max_iterations)
    x, k, _, ok = fista(
        fun, grad_fn, proj, start, smoothness, tol=tol, max_iterations=max(1, max_iterations - its), stop=stop
    )
    its += k
    if not ok:
        extra = guaranteed_iterations(
            smoothness, strong_convexity, initial_distance, tol, constrained=project is not None
        )
        if extra is not None:
            _, k, ok = _projected_gradient(grad_fn, proj, x0, smoothness, extra, stop)
            its += k
    if not best:  # pragma: no cover - the solvers evaluate the test at least once
        point, g, dist = certify_point(x, grad_fn(x), project, smoothness, strong_convexity)
        best = [(point, g, dist)]
    point, g, dist = best[0]
    return CertifiedSolve(point, its, g, dist, bool(g <= tol))


def _lbfgs_warm_start(
    fun: Callable[[Array], float],
    grad_fn: Callable[[Array], Array],
    x0: Array,
    tol: float,
    max_iterations: int,
) -> tuple[Array, int]:
    """L-BFGS from x0 towards a gradient norm <= tol (scipy; it stops early on floating-point ties).

    Only a starting point for the certified solve: whatever it returns, the released point is the
    one :func:`certify_point` certifies with the declared smoothness, so any starting point is sound.
    """
    d = max(1, x0.size)
    try:
        res = optimize.minimize(
            fun, x0, jac=grad_fn, method="L-BFGS-B",
            options={"gtol": tol / math.sqrt(d), "ftol": 0.0, "maxiter": max_iterations, "maxcor": 20},
        )  # fmt: skip
    except (ValueError, ArithmeticError, np.linalg.LinAlgError):  # pragma: no cover - defensive
        return x0, 0
    x = np.asarray(res.x, dtype=float)
    if not np.all(np.isfinite(x)):  # pragma: no cover - defensive
        return x0, int(res.nit)
    return x, int(res.nit)


def fista(
    fun: Any,
    grad_fn: Any,
    project: Any,
    x0: Array,
    lipschitz: float,
    *,
    tol: float,
    max_iterations: int,
    stop: Callable[[Array, Array], bool] | None = None,
) -> tuple[Array, int, float, bool]:
    """Accelerated projected gradient with backtracking and gradient-based adaptive restart.

    ``lipschitz`` is an upper bound on the smoothness (the declared worst case); the step starts
    at 1024/lipschitz and is halved by Beck-Teboulle backtracking until the sufficient-decrease
    test holds (the actual curvature is usually much smaller than the declared bound).  Without
    ``stop`` the run ends when the gradient-mapping norm at the backtracked step is at most
    ``tol``; with it, when ``stop(y, ∇J(y))`` is true at the extrapolated point y (then the first
    returned value is y).  Returns (x, iterations, gradient-mapping norm, converged).
    """
    lip_est = lipschitz / 1024
    x = project(x0)
    yk, t = x.copy(), 1.0
    res = math.inf
    for it in range(1, max_iterations + 1):
        fy, gy = fun(yk), grad_fn(yk)
        if stop is not None and stop(yk, gy):
            return yk, it - 1, res, True
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
        if stop is None and res <= tol:
            return x_new, it, res, True
        t_new = (1 + math.sqrt(1 + 4 * t * t)) / 2
        if float(np.dot(gy, x_new - x)) > 0:  # restart momentum
            t_new, yk = 1.0, x_new.copy()
        else:
            yk = x_new + ((t - 1) / t_new) * (x_new - x)
        x, t = x_new, t_new
    if stop is not None and stop(yk, grad_fn(yk)):
        return yk, max_iterations, res, True
    return x, max_iterations, res, False


def _inexact_split(budget: Budget, fraction: float) -> tuple[Budget, Budget]:
    """(objective-perturbation share, output-noise share) of ``budget``: ``1 − fraction`` : ``fraction``
    of both ε and δ (basic composition of the two shares is exactly ``budget``)."""
    return (
        Budget(budget.epsilon * (1 - fraction), budget.delta * (1 - fraction)),
        Budget(budget.epsilon * fraction, budget.delta * fraction),
    )


#: How to run under add/remove neighbours with δ > 0 (the refusal's advice).
_PURE_EPSILON_HINT = Hint(
    "pass a budget with δ = 0, or use {0} (the add/remove default for δ > 0)", Setting("method", "dp_sgd")
)


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
    inexact_fraction: float = 0.01,
    declared_size: int | None = None,
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
        Public tolerance γ: the released point's gradient-mapping norm (of the perturbed objective,
        computed with the declared smoothness bound) must be certified to be at most ``tol``.  It
        sets the extra output noise (sensitivity ``2γ/μ`` unconstrained, ``4γ/μ`` over a set).
    max_iterations : int, default 50000
        Cap on the accelerated inner solver.  If it has not certified ``tol`` by then, plain
        projected gradient runs for the number of steps that provably certifies it
        (:func:`guaranteed_iterations`, from declared constants and the noise only); a private run
        that still cannot certify (floating point) raises :class:`InexactSolveError` and releases
        nothing (the committed budget is spent).
    jacobian_fraction : float, default 0.1
        Share of ε spent on the Jacobian term ("tight" only): larger means less added
        regularisation and more noise.
    inexact_fraction : float, default 0.01
        Share of ε and δ spent on the output noise that covers the inexact solve (0 < · < 1).
    declared_size : int, optional
        A public dataset size N (what ``minimize(..., neighbouring="add_remove", declared_size=N)``
        passes): the guarantee is then stated under **add/remove** neighbours, pure ε only (δ = 0,
        ``calibration="tight"``, ``l2_penalty = 0``), and N only scales the solver tolerance; the
        data's own size never reaches the calibration (see Privacy).

    Returns
    -------
    OptimizeResult
        ``iterations`` is 1 (one perturbed minimisation); the inner solver's iteration count and
        certified gradient norm depend on the data and are only in ``nonprivate_diagnostics``.
        ``parameters`` holds ζ, σ, the output noise ``output_sigma`` and its sensitivity.

    Raises
    ------
    InexactSolveError
        When a private run's inner solve is not certified within ``max_iterations``.

    Privacy
    -------
    (ε, δ)-DP under **replace-one** neighbours for GLM losses with declared bounds.  The budget is
    split: ``(1 − f)(ε, δ)`` for the exact perturbed minimiser θ* and ``f·(ε, δ)`` for an output
    Gaussian (f = ``inexact_fraction``); by basic composition the run is (ε, δ)-DP and is recorded
    as one ``EpsilonDeltaEvent(ε, δ)``, committed before any noise is drawn.

    *Exact minimiser.*  With L = ``problem.lipschitz("l2")`` and λ = ``problem.smoothness()`` (both
    from the declared bounds), the density ratio of θ* between neighbours is at most
    ``(1 + λ/(nζ))·exp((2<b, u> + ‖u‖²)/(2σ²))`` where ζ is the total ridge (added regulariser +
    ``l2_penalty``) and ``u`` (‖u‖ <= 2L/n) lies in the span of the two differing records; a χ₂
    tail bound on the projected noise gives ``ε = ln(1 + λ/(nζ)) + t/z + 1/(2z²)``,
    ``z = σn/(2L)``, ``t = sqrt(2 ln(1/δ))``; integrating the hockey-stick divergence against the
    χ₂ law instead (:func:`chi2_delta`) certifies a smaller ε at the same δ, which is what
    :func:`replace_one_epsilon` returns.  ``"tight"`` splits its share as ``jacobian_fraction`` :
    rest (or, when the public ``l2_penalty`` already exceeds the ridge that split needs, spends
    only ``ln(1 + λ/(n·l2_penalty))`` on the Jacobian term) and solves for ζ and σ
    (:func:`replace_one_calibration`).  KST's constants (ζ = 2λ/(nε),
    ``σ = L sqrt(8 log(2/δ) + 4ε)/(nε)``) correspond to a gradient difference of L/n (one record
    added or removed); under replace-one this analysis certifies a larger ε, and [TTZ]'s
    ``σ² = 2L² log(1/δ)/(nε)²`` is smaller still (both keep the seed's constants at the full
    (ε, δ), so their claim is the seed's and ``privacy.true_epsilon`` is the χ₂ figure for θ* at
    ``(1 − f)δ`` plus the output Gaussian's ``fε``).  For a constraint set the argument follows KST's
    extension to convex domains.

    *Add/remove, pure ε* (``declared_size`` given).  Written as a sum,
    ``θ* = argmin Σᵢ ℓᵢ(θ) + <b, θ> + (Λ/2)‖θ − θ₀‖²`` with b of density ∝ exp(−α‖b‖₂).  Adding a
    record z moves the noise that maps to a given θ by ``∇ℓ_z(θ)`` (norm <= L) and multiplies the
    Jacobian determinant by at most ``1 + λ/Λ`` (a rank-one Hessian ``φ''xxᵀ``), so the output is
    ``(ln(1 + λ/Λ) + αL)``-DP in both directions: the same argument as replace-one with one record's
    gradient instead of the difference of two.  Λ and α come from ε, L, λ and the Jacobian share
    only -- no n.  The solver works on the same objective divided by n (ridge Λ/n, noise b/n; the
    minimiser is identical), stops when the *sum*'s gradient-mapping norm is certified <= γ·N
    (γ = ``tol``, N declared), so ``‖θ̂ − θ*‖ <= γN/Λ`` (``2γN/Λ`` over a set) is public, and the
    output l2-Laplace noise is calibrated to twice that.

    *Inexact solve* (approximate minima perturbation, Iyengar et al. 2019).  The perturbed
    objective J is μ-strongly convex with μ = ζ + ``l2_penalty`` (public) and the solver stops only
    when the gradient-mapping norm of J at the point θ̂ it returns is certified to be <= γ = ``tol``
    (:func:`certify_point`: computed with the declared smoothness bound, on the released point),
    which implies ``‖θ̂ − θ*‖ <= r = γ/μ`` (``2γ/μ`` over a set).  The release is
    ``θ̂ + N(0, σ_out² I)``: view it as θ* (released first, covered above) followed by a Gaussian
    mechanism whose mean ``θ* + e`` with ``e = θ̂ − θ*`` depends on the data and on θ* only through
    a vector of norm <= r, so for a fixed θ* the means under two neighbours differ by at most 2r;
    σ_out is the analytic-Gaussian (Balle-Wang) level for sensitivity ``2r`` at ``f·(ε, δ)``.
    Adaptive composition covers the pair, and the release (projected onto C when there is a set)
    is a function of it.  γ is declared, never measured.  *Refusal*: the solve cannot fail to certify for data-dependent reasons: if the
    accelerated solver has not certified γ within ``max_iterations``, projected gradient runs from
    x₀ for :func:`guaranteed_iterations` steps, a count computed from β, μ, γ and a bound on
    ``‖x₀ − θ*‖`` that uses only L, λ, ζ, θ₀, C's diameter and ‖b‖ (noise, not data; the count is
    not released), after which the certificate holds for every dataset in exact arithmetic.  Only
    a floating-point failure can then raise :class:`InexactSolveError` (nothing is released and the
    committed budget is spent).  Without a budget nothing is private and an uncertified solve only
    warns.
    """
    if not isinstance(problem, ERMProblem):
        raise InvalidParameterError("problem: expected a dpopt.problems.ERMProblem")
    loss = problem.loss
    assert not isinstance(loss, str)
    if not loss.smooth:
        raise InvalidParameterError("objective perturbation needs a twice-differentiable loss")
    calibration = check_calibration(calibration, ("tight", "kst", "paper"))
    bud = parse_budget(budget)
    add_remove = declared_size is not None
    acct = check_caller_accountant(
        accountant, "add_remove" if add_remove else "replace_one", who="objective perturbation"
    )
    tol = check_positive(tol, "tol")
    if not 0 < check_positive(jacobian_fraction, "jacobian_fraction") < 1:
        raise InvalidParameterError("jacobian_fraction: must lie in (0, 1)")
    if not 0 < check_positive(inexact_fraction, "inexact_fraction") < 1:
        raise InvalidParameterError("inexact_fraction: must lie in (0, 1)")
    max_iterations = check_int(max_iterations, "max_iterations")
    if add_remove:
        N = check_int(declared_size, "declared_size")
        if bud is not None and bud.delta > 0:
            raise InvalidParameterError(
                "objective perturbation under neighbouring='add_remove' has a pure-ε analysis only",
                hint=_PURE_EPSILON_HINT,
            )
        if bud is not None and calibration != "tight":
            raise InvalidParameterError(
                "declared_size: the add/remove analysis uses calibration='tight' only"
            )
        if problem.l2_penalty > 0:
            raise InvalidParameterError(
                "objective perturbation under neighbouring='add_remove': l2_penalty must be 0 (the average "
                "loss's penalty scales with the private n in the sum the analysis bounds); the method adds "
                "its own public ridge"
            )
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
    zeta, sigma, sigma_out, sens_out = 0.0, 0.0, 0.0, 0.0
    alpha, alpha_out = 0.0, 0.0
    if bud is not None:
        if bud.delta <= 0 and calibration != "tight":
            raise InvalidParameterError(
                f"calibration={calibration!r} uses Gaussian noise and needs δ > 0; the default "
                "calibration='tight' has a pure-ε form (l2-Laplace noise) for δ = 0"
            )
        op_share, out_share = _inexact_split(bud, inexact_fraction)
        if add_remove:
            # the sum form: ridge Λ and noise rate α from ε, L, λ only (jacobian_split with n = 1);
            # the solver's average form divides both by the data's n (the same minimiser)
            eps2, ridge_sum = jacobian_split(
                op_share.epsilon, hessian=hess, n=1, jacobian_fraction=jacobian_fraction
            )
            alpha = eps2 / L2
            zeta = ridge_sum / n
        elif bud.delta <= 0:
            alpha, ridge = pure_calibration(
                op_share.epsilon,
                lipschitz=L2,
                hessian=hess,
                n=n,
                jacobian_fraction=jacobian_fraction,
                l2_penalty=problem.l2_penalty,
            )
            zeta = max(ridge - problem.l2_penalty, 0.0)
        elif calibration == "tight":
            sigma, ridge = replace_one_calibration(
                op_share.epsilon,
                op_share.delta,
                lipschitz=L2,
                hessian=hess,
                n=n,
                jacobian_fraction=jacobian_fraction,
                l2_penalty=problem.l2_penalty,
            )
            zeta = max(ridge - problem.l2_penalty, 0.0)
        else:
            zeta = max(2 * hess / (n * bud.epsilon) - problem.l2_penalty, 0.0)
            if calibration == "paper":
                sigma = L2 * math.sqrt(2 * math.log(1 / bud.delta)) / (n * bud.epsilon)
            else:
                sigma = kst_sigma(L2, n, bud.epsilon, bud.delta)
        mu = zeta + problem.l2_penalty
        if not mu > 0:
            raise InvalidParameterError(  # pragma: no cover - ζ > 0 whenever l2_penalty is 0
                "objective perturbation needs a strongly convex perturbed objective (ζ + l2_penalty > 0)"
            )
        sens_out = 2 * (tol if C is None else 2 * tol) / mu
        if add_remove:  # the sum's tolerance γN over its public ridge Λ: no n
            sens_out = 2 * (tol * N if C is None else 2 * tol * N) / ridge_sum
        if bud.delta <= 0:
            # l2-Laplace (density ∝ exp(-α‖v‖)) is (α·Δ₂)-DP: pure fε at sensitivity 2r
            alpha_out = out_share.epsilon / sens_out
            rel_rule = "add-remove" if add_remove else "replace-one"
            event = EpsilonDeltaEvent(bud.epsilon, 0.0, rule=f"objective-perturbation-{rel_rule}-pure+amp")
        # analytic Gaussian (Balle-Wang): exactly (fε, fδ)-DP at sensitivity 2r, for any ε
        elif calibration == "tight":
            sigma_out = gaussian_sigma(out_share.epsilon, out_share.delta, sens_out)
            # basic composition of the two shares: (1 − f)(ε, δ) + f(ε, δ) = (ε, δ)
            event = EpsilonDeltaEvent(bud.epsilon, bud.delta, rule="objective-perturbation-replace-one+amp")
        else:
            sigma_out = gaussian_sigma(out_share.epsilon, out_share.delta, sens_out)
            true_eps = replace_one_epsilon(sigma, mu, lipschitz=L2, hessian=hess, n=n, delta=op_share.delta)
            truth = EpsilonDeltaEvent(
                max(true_eps, op_share.epsilon) + out_share.epsilon,
                bud.delta,
                rule="replace-one-analysis+amp",
            )
            event = EpsilonDeltaEvent(
                bud.epsilon, bud.delta, source=truth, rule=f"{calibration}-objective-perturbation"
            )

    gen = check_rng(rng)
    if bud is not None and isinstance(gen, SecureRNG):  # refused before anything is spent
        raise InvalidParameterError(
            "rng='secure': objective perturbation's noise enters the objective, and its proof needs a "
            "continuous noise density (a noise vector on a grid is not covered: a neighbour's minimiser "
            "would need off-grid noise); use output_perturbation or a DP gradient method with "
            "rng='secure', or an int seed / None here"
        )
    privacy = commit(
        event,
        budget=bud,
        neighbouring="add_remove" if add_remove else "replace_one",
        kind="pld" if calibration == "tight" else "advanced",
        accountant=acct,
        label="objective-perturbation",
    )
    if alpha > 0:
        b = l2_laplace_noise(alpha, p, rng=gen)
        if add_remove:
            b = b / n  # the sum form's noise, in the solver's average form
    else:
        b = gaussian_noise(sigma, p, rng=gen) if sigma > 0 else np.zeros(p)

    loss = make_loss(problem.loss)
    lam = problem.l2_penalty
    last: list[Any] = [None, None]  # the solver asks for J and ∇J at the same point: one X @ θ for both

    def margins(theta: Array) -> Array:
        key = theta.tobytes()
        if last[0] != key:
            last[:] = [key, np.asarray(Xc @ theta).ravel()]
        return np.asarray(last[1])

    def fun(theta: Array) -> float:
        d = theta - theta0
        obj = float(np.mean(loss.value(margins(theta), yc))) + 0.5 * lam * float(theta @ theta)
        return obj + 0.5 * zeta * float(d @ d) + float(b @ theta)

    def grad(theta: Array) -> Array:
        g = np.asarray(Xc.T @ (loss.derivative(margins(theta), yc) / yc.shape[0])).ravel()
        return (g + lam * theta if lam else g) + zeta * (theta - theta0) + b

    beta = hess + problem.l2_penalty + zeta
    mu_j = zeta + problem.l2_penalty
    # public bound on ‖x0 − θ*‖ (declared constants and the noise b, never the data): at the start
    # x0 = P_C(θ0), ‖∇J(x0)‖ <= L + l2_penalty‖x0‖ + ζ‖x0 − θ0‖ + ‖b‖ =: g0, and strong convexity
    # gives ‖x0 − θ*‖ <= g0/μ (3g0/μ over a set, by certify_point's bound at x0; or C's diameter)
    x_start = np.asarray(C.project(theta0), dtype=float) if C is not None else theta0
    g0 = (
        L2
        + problem.l2_penalty * float(np.linalg.norm(x_start))
        + zeta * float(np.linalg.norm(x_start - theta0))
        + float(np.linalg.norm(b))
    )
    d0 = math.inf if mu_j <= 0 else g0 / mu_j if C is None else min(C.diameter, 3 * g0 / mu_j)
    solve = certified_minimize(
        fun,
        grad,
        C.project if C is not None else None,
        theta0,
        beta,
        mu_j if mu_j > 0 else 1.0,  # non-private, unregularised: the distance bound is unused
        tol=tol * N / n if add_remove else tol,  # add/remove: the sum's tolerance γN, per record
        max_iterations=max_iterations,
        initial_distance=d0,
    )
    if not solve.certified:
        if bud is not None:
            raise InexactSolveError(
                f"objective perturbation: the inner solver did not certify a gradient-mapping norm <= tol={tol:g} "
                f"within max_iterations={max_iterations}; nothing was released (the privacy analysis covers "
                "only a certified solve) and the committed budget is spent. Raise max_iterations (or tol, "
                "which adds output noise)"
            )
        warnings.warn(
            f"objective perturbation (non-private): the inner solver stopped after {solve.iterations} "
            f"iterations without reaching tol={tol:g}. Increase max_iterations or tol",
            ConvergenceWarning,
            stacklevel=2,
        )
    theta = solve.point
    if alpha_out > 0:
        noise_out = l2_laplace_noise(alpha_out, p, rng=gen)
    else:
        noise_out = gaussian_noise(sigma_out, p, rng=gen) if sigma_out > 0 else np.zeros(p)
    release = theta + noise_out
    if C is not None:  # post-processing: the released point stays in C
        release = np.asarray(C.project(release), dtype=float)
    status: Status = "converged" if solve.certified else "max_iter"
    params = {
        "regularization": zeta,
        "sigma": sigma,
        "lipschitz_l2": L2,
        "hessian_bound": hess,
        "inner_tol": tol,
        "inexact_fraction": inexact_fraction,
        "jacobian_fraction": jacobian_fraction,
        "output_sigma": sigma_out,
        "output_sensitivity": sens_out,
        "noise": "l2_laplace" if alpha > 0 else "gaussian",
        "l2_laplace_alpha": alpha,
        "output_l2_laplace_alpha": alpha_out,
    }
    if add_remove:  # the data's n is private under add/remove: report the sum form's ridge Λ, not Λ/n
        params["declared_size"] = N
        params["regularization"] = ridge_sum if bud is not None else 0.0
    else:
        params["n_samples"] = n
    diag: dict[str, Any] = {}
    if diagnostics:
        diag = {"inner_iterations": solve.iterations, "inner_residual": solve.gradient_norm}
        diag.update(nonprivate_diagnostics(problem, theta, Xc, yc))
    return OptimizeResult(
        solution=release,
        privacy=privacy,
        status=status,
        iterations=1,
        method="objective_perturbation",
        calibration=calibration if bud is not None else "none",
        parameters=params,
        message=(
            "certified minimiser of the perturbed objective plus output noise for the inexact solve"
            if solve.certified
            else "inner solver did not reach tol (non-private run)"
        ),
        nonprivate_diagnostics=diag,
    )
