"""Output perturbation of l2-regularised ERM (Chaudhuri, Monteleoni and Sarwate 2011, Alg. 1).

Release ``θ* + N(0, σ² I)`` where ``θ* = argmin_{θ∈C} F(θ; D) + (λ/2)‖θ‖²`` and ``λ`` is the
problem's (public) ``l2_penalty``.  The minimiser is computed by the accelerated projected-gradient
solver of :mod:`dpopt.solvers.objective_perturbation` to a gradient-mapping norm of ``tol``.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np
from numpy.typing import NDArray
from scipy import special

from dpopt._validation import check_int, check_positive
from dpopt.accounting import Accountant, GaussianEvent, PrivacyEvent
from dpopt.exceptions import ConvergenceWarning, InvalidParameterError
from dpopt.mechanisms import gaussian_noise
from dpopt.problems import ERMProblem, LogisticLoss, Loss
from dpopt.randomness import RNGLike, check_rng
from dpopt.solvers._result import OptimizeResult, Status
from dpopt.solvers.minimize import (
    BudgetLike,
    check_accountant,
    check_calibration,
    commit_privacy,
    gaussian_sigma_for_steps,
    nonprivate_diagnostics,
    parse_budget,
)

__all__ = ["output_perturbation_sensitivity", "private_output_perturbation", "solution_radius"]

Array = NDArray[np.float64]


def _lipschitz_on_ball(problem: ERMProblem, dim: int, radius: float) -> float:
    """Declared per-example l2 Lipschitz bound of the loss on ``C ∩ {‖θ‖₂ <= radius}``.

    On that ball ``|<x, θ>| <= radius·B`` (B the declared l2 feature bound).  For the logistic loss
    ``|φ'(z, y)| = |y| expit(-y z) <= b·expit(b·radius·B)`` with b the label bound (1 for ±1 labels),
    which is below the margin-free bound b used by :class:`dpopt.problems.LogisticLoss`; other
    losses use their own margin-dependent bound.
    """
    loss = problem.loss
    assert isinstance(loss, Loss)
    feat = problem.bounds.feature_l2(dim)
    margin = radius * feat
    lb = problem.bounds.label(required=not loss.classification)
    if isinstance(loss, LogisticLoss):
        deriv = min(lb, lb * float(special.expit(lb * margin)))
    else:
        deriv = loss.derivative_bound(margin, lb)
    lip = deriv * feat
    if problem.constraint is not None:
        lip = min(lip, problem.lipschitz("l2", dim=dim))
    return lip


def solution_radius(problem: ERMProblem, dim: int, *, iterations: int = 100) -> tuple[float, float]:
    """(R, L_R): a public radius with ``‖θ*‖₂ <= R`` for *every* dataset, and the Lipschitz bound on it.

    Optimality of ``θ*`` against the feasible point 0 gives ``λ‖θ*‖² <= -<∇F(θ*), θ*> <= L_r‖θ*‖``
    whenever ``‖θ*‖ <= r`` and ``L_r`` bounds the per-example gradient on the ball of radius r, so
    ``R ← min(R, L_R/λ)`` starting from ``R = L/λ`` (L: the problem's global bound) never excludes
    the minimiser.  For the logistic loss ``L_R = B/(1 + e^{-B R})`` (B the feature bound) tends to
    ``B/2`` as λ grows, which halves the sensitivity of a strongly regularised release.  Uses only
    declared bounds and λ.
    """
    lam = problem.l2_penalty
    if lam <= 0:
        raise InvalidParameterError("output perturbation needs l2_penalty > 0 (strong convexity)")
    radius = problem.lipschitz("l2", dim=dim) / lam
    if not math.isfinite(radius):
        raise InvalidParameterError("output perturbation needs a loss with a bounded gradient")
    for _ in range(iterations):
        lip_r = _lipschitz_on_ball(problem, dim, radius)
        new = min(radius, lip_r / lam)
        if new >= radius * (1 - 1e-12):
            break
        radius = new
    return radius, _lipschitz_on_ball(problem, dim, radius)


def output_perturbation_sensitivity(problem: ERMProblem, n: int, dim: int, *, tol: float = 0.0) -> float:
    """Replace-one l2 sensitivity of the released minimiser: ``2 L_R/(nλ) + 4 tol/λ``.

    ``2 L_R/(nλ)``: Chaudhuri et al. 2011, Cor. 8 (strong convexity λ plus an L_R-Lipschitz change of
    one of the n losses on the convex set ``C ∩ {‖θ‖ <= R}``, which contains every minimiser, see
    :func:`solution_radius`).  ``4 tol/λ``: the computed point is within ``2 tol/λ`` of the exact
    minimiser of either dataset when the gradient-mapping norm is at most ``tol``.
    """
    _, lip = solution_radius(problem, dim)
    lam = problem.l2_penalty
    return 2 * lip / (n * lam) + 4 * tol / lam


def private_output_perturbation(
    problem: ERMProblem,
    X: Any,
    y: Any,
    *,
    budget: BudgetLike,
    rng: RNGLike,
    calibration: str = "tight",
    accountant: Accountant | None = None,
    diagnostics: bool = False,
    tol: float = 1e-10,
    max_iterations: int = 50_000,
) -> OptimizeResult:
    """Output perturbation of strongly convex (l2-regularised) ERM with Gaussian noise.

    Parameters
    ----------
    problem : ERMProblem
        A loss with a bounded gradient (logistic, smooth hinge; squared needs a bounded constraint
        set) and ``l2_penalty = λ > 0``.  ``constraint`` must contain 0 (``None``, or a set
        centred at 0 such as an l2 ball).
    X, y
        Private data.
    budget, rng, accountant, diagnostics
        See :func:`dpopt.solvers.minimize`.
    calibration : {"tight"}, default "tight"
        σ is the smallest (to 0.2%) Gaussian standard deviation the PLD accountant accepts for the
        budget at sensitivity Δ (analytic Gaussian mechanism).
    tol : float, default 1e-10
        Gradient-mapping tolerance of the inner solver; it enters the sensitivity (``+4 tol/λ``).
    max_iterations : int, default 50000
        Cap on the inner solver (a ConvergenceWarning says the tolerance was not met).

    Returns
    -------
    OptimizeResult
        ``parameters`` holds λ, the public solution radius R, the Lipschitz bound L_R on it, the
        sensitivity Δ and σ.

    Privacy
    -------
    (ε, δ)-DP under **replace-one** neighbours (n public) given the declared bounds of
    ``problem.bounds``.  Every minimiser lies in the public ball ``‖θ‖ <= R``
    (:func:`solution_radius`), so replacing one record moves it by at most
    ``Δ = 2 L_R/(nλ)`` in l2 (Chaudhuri et al. 2011), plus ``4 tol/λ`` for the inexact inner solve
    (the gradient-mapping norm at the returned point is at most ``tol``, checked, or the run warns).
    Gaussian noise ``N(0, σ² I)`` is calibrated to (ε, δ) for sensitivity Δ and the event
    ``GaussianEvent(σ, Δ)`` is composed (PLD) before the noise is drawn.  Constants come from the
    declared bounds and λ only.
    """
    if not isinstance(problem, ERMProblem):
        raise InvalidParameterError("problem: expected a dpopt.problems.ERMProblem")
    check_calibration(calibration, ("tight",))
    bud = parse_budget(budget)
    acct = check_accountant(accountant)
    tol = check_positive(tol, "tol")
    max_iterations = check_int(max_iterations, "max_iterations")
    lam = problem.l2_penalty
    if lam <= 0:
        raise InvalidParameterError("output perturbation needs l2_penalty > 0 (strong convexity)")
    C = problem.constraint
    if C is not None and not np.allclose(C.center(), 0.0):
        raise InvalidParameterError("output perturbation: the constraint set must be centred at 0")
    Xc, yc = problem.prepare(X, y)
    n, p = Xc.shape
    radius, lip = solution_radius(problem, p)
    sens = 2 * lip / (n * lam) + 4 * tol / lam

    event: PrivacyEvent | None = None
    sigma = 0.0
    if bud is not None:
        if bud.delta <= 0:
            raise InvalidParameterError("output perturbation with Gaussian noise needs δ > 0")
        sigma = gaussian_sigma_for_steps(bud, sens, 1)
        event = GaussianEvent(sigma, sens)
    privacy = commit_privacy(event, budget=bud, kind="pld", accountant=acct, label="output-perturbation")
    gen = check_rng(rng)
    noise = gaussian_noise(sigma, p, rng=gen) if sigma > 0 else np.zeros(p)

    from dpopt.solvers.objective_perturbation import fista

    def fun(theta: Array) -> float:
        return problem.objective(theta, Xc, yc)

    def grad(theta: Array) -> Array:
        return problem.gradient(theta, Xc, yc)

    project = C.project if C is not None else (lambda v: v)
    beta = problem.smoothness(dim=p) + lam
    theta, its, res, ok = fista(fun, grad, project, np.zeros(p), beta, tol=tol, max_iterations=max_iterations)
    status: Status = "converged" if ok else "max_iterations"
    if not ok:
        warnings.warn(
            f"output perturbation: the inner solver stopped after {its} iterations with gradient-mapping "
            f"norm {res:.3g} > tol={tol:g}; the sensitivity bound assumes it is at most tol. Increase "
            "max_iterations or tol",
            ConvergenceWarning,
            stacklevel=2,
        )
    params = {
        "l2_penalty": lam,
        "solution_radius": radius,
        "lipschitz_l2": lip,
        "sensitivity": sens,
        "sigma": sigma,
        "inner_tol": tol,
        "n_samples": n,
    }
    diag: dict[str, Any] = {}
    if diagnostics:
        diag = {"inner_iterations": its, "inner_residual": res}
        diag.update(nonprivate_diagnostics(problem, theta, Xc, yc))
    return OptimizeResult(
        solution=theta + noise,
        privacy=privacy,
        status=status,
        iterations=1,
        method="output_perturbation",
        calibration="tight" if bud is not None else "none",
        parameters=params,
        message="regularised minimiser plus Gaussian noise" if ok else "inner solver did not converge",
        nonprivate_diagnostics=diag,
    )
