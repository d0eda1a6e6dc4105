"""Output perturbation of l2-regularised ERM (Chaudhuri, Monteleoni and Sarwate 2011, Alg. 1).

Release Release ``θ̂ + N(0, σ² I)`` where θ̂ approximates ``θ* = argmin_{θ∈C} F(θ; D) + (λ/2)‖θ‖²`` and ``λ``
is the problem's (public) ``l2_penalty``.  θ̂ is computed by the accelerated projected-gradient
solver of :mod:`dpopt.solvers.objective_perturbation` until its gradient-mapping norm is certified
to be at most ``tol`` (:func:`~dpopt.solvers.objective_perturbation.certified_minimize`), which
bounds ``‖θ̂ − θ*‖`` and enters the sensitivity; an uncertified solve releases nothing.
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
from dpopt.mechanisms import GaussianMechanism
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
    """Replace-one l2 sensitivity of the released point: ``2 L_R/(nλ) + 2r``.

    ``2 L_R/(nλ)``: Chaudhuri et al. 2011, Cor. 8 (strong convexity λ plus an L_R-Lipschitz change of
    one of the n losses on the convex set ``C ∩ {‖θ‖ <= R}``, which contains every minimiser, see
    :func:`solution_radius`).  ``2r``: the released point is certified to lie within ``r`` of the
    exact minimiser of its own dataset, ``r = tol/λ`` without a constraint set and ``2 tol/λ`` with
    one (:func:`~dpopt.solvers.objective_perturbation.certify_point`), for each of the two datasets.
    """
    _, lip = solution_radius(problem, dim)
    lam = problem.l2_penalty
    r = (tol if problem.constraint is None else 2 * tol) / lam
    return 2 * lip / (n * lam) + 2 * r


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
        Public tolerance γ: the gradient-mapping norm of the released point (computed with the
        declared smoothness bound) must be certified to be at most ``tol``; it enters the
        sensitivity (``+2γ/λ`` unconstrained, ``+4γ/λ`` over a constraint set).
    max_iterations : int, default 50000
        Cap on the accelerated inner solver.  If it has not certified ``tol`` by then, plain
        projected gradient runs for the public number of steps that provably certifies it
        (:func:`~dpopt.solvers.objective_perturbation.guaranteed_iterations` from β, λ, ``tol`` and
        the solution radius R); a private run that still cannot certify (floating point) raises
        :class:`~dpopt.solvers.objective_perturbation.InexactSolveError` and releases nothing.

    Returns
    -------
    OptimizeResult
        ``parameters`` holds λ, the public solution radius R, the Lipschitz bound L_R on it, the
        sensitivity Δ and σ.

    Raises
    ------
    InexactSolveError
        When a private run's inner solve is not certified within ``max_iterations``.

    Privacy
    -------
    (ε, δ)-DP under **replace-one** neighbours (n public) given the declared bounds of
    ``problem.bounds``.  Every minimiser lies in the public ball ``‖θ‖ <= R``
    (:func:`solution_radius`), so replacing one record moves it by at most
    ``2 L_R/(nλ)`` in l2 (Chaudhuri et al. 2011).  The released point θ̂ is not θ* itself: the
    solver stops only when θ̂'s gradient-mapping norm, computed with the declared smoothness bound
    at θ̂ (not the solver's own estimate), is at most γ = ``tol``, and λ-strong convexity then gives
    ``‖θ̂ − θ*‖ <= r`` with ``r = γ/λ`` (``2γ/λ`` over a set; see
    :func:`~dpopt.solvers.objective_perturbation.certify_point`) for whatever dataset was used, so
    ``Δ = 2 L_R/(nλ) + 2r`` bounds how far the released point can move between neighbours.
    Gaussian noise ``N(0, σ² I)`` is calibrated to (ε, δ) for sensitivity Δ and the event
    ``GaussianEvent(σ, Δ)`` is composed (PLD) before the noise is drawn.  Constants come from the
    declared bounds, λ and the declared γ only; a release over a constraint set is projected onto
    it (post-processing).  *Refusal*: the solve cannot fail to certify for data-dependent reasons:
    after ``max_iterations`` accelerated steps, projected gradient from 0 runs for a number of steps
    computed from β, λ, γ and ``‖0 − θ*‖ <= R`` (declared constants only), which certifies γ for
    every dataset in exact arithmetic; only a floating-point failure can then raise
    :class:`~dpopt.solvers.objective_perturbation.InexactSolveError` (nothing is released).
    Without a budget nothing is private and an uncertified solve only warns.
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
    sens = output_perturbation_sensitivity(problem, n, p, tol=tol)

    event: PrivacyEvent | None = None
    sigma = 0.0
    if bud is not None:
        if bud.delta <= 0:
            raise InvalidParameterError("output perturbation with Gaussian noise needs δ > 0")
        sigma = gaussian_sigma_for_steps(bud, sens, 1)
        event = GaussianEvent(sigma, sens)
    privacy = commit_privacy(event, budget=bud, kind="pld", accountant=acct, label="output-perturbation")
    gen = check_rng(rng)

    from dpopt.solvers.objective_perturbation import InexactSolveError, certified_minimize

    def fun(theta: Array) -> float:
        return problem.objective(theta, Xc, yc)

    def grad(theta: Array) -> Array:
        return problem.gradient(theta, Xc, yc)

    beta = problem.smoothness(dim=p) + lam
    solve = certified_minimize(
        fun,
        grad,
        C.project if C is not None else None,
        np.zeros(p),
        beta,
        lam,
        tol=tol,
        max_iterations=max_iterations,
        initial_distance=radius,  # ‖0 − θ*‖ <= R (solution_radius, declared constants only)
    )
    if not solve.certified:
        if bud is not None:
            raise InexactSolveError(
                f"output perturbation: the inner solver did not certify a gradient-mapping norm <= tol={tol:g} "
                f"within max_iterations={max_iterations}; nothing was released (the sensitivity bound covers "
                "only a certified solve) and the committed budget is spent. Raise max_iterations (or tol, "
                "which adds noise)"
            )
        warnings.warn(
            f"output perturbation (non-private): the inner solver stopped after {solve.iterations} iterations "
            f"without reaching tol={tol:g}. Increase max_iterations or tol",
            ConvergenceWarning,
            stacklevel=2,
        )
    theta = solve.point
    # one Gaussian release of the certified point (rng="secure": snapped to the noise grid, exact
    # sampler, the grid's sensitivity accounted); the same draws as before for seeded generators
    release = (
        np.asarray(GaussianMechanism(sigma, sens).release(theta, rng=gen), dtype=float)
        if sigma > 0
        else theta
    )
    if C is not None:  # post-processing: the released point stays in C
        release = np.asarray(C.project(release), dtype=float)
    status: Status = "converged" if solve.certified else "max_iter"
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
        diag = {"inner_iterations": solve.iterations, "inner_residual": solve.gradient_norm}
        diag.update(nonprivate_diagnostics(problem, theta, Xc, yc))
    return OptimizeResult(
        solution=release,
        privacy=privacy,
        status=status,
        iterations=1,
        method="output_perturbation",
        calibration="tight" if bud is not None else "none",
        parameters=params,
        message=(
            "certified regularised minimiser plus Gaussian noise"
            if solve.certified
            else "inner solver did not reach tol (non-private run)"
        ),
        nonprivate_diagnostics=diag,
    )
