"""Solvers whose privacy proof needs an exact minimiser release only certified inexact ones (issue 12 §2).

Objective perturbation and output perturbation stop only when the gradient-mapping norm of the point
they release, computed with the declared smoothness bound, is at most the public ``tol``; the
distance to the exact minimiser that this certifies is paid for (output noise / sensitivity), and a
private solve that cannot be certified releases nothing.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from scipy import optimize

from dpopt.accounting import Budget, make_accountant
from dpopt.exceptions import ConvergenceWarning, DPOptError
from dpopt.problems import DataBounds, ERMProblem, L2Ball
from dpopt.solvers import minimize
from dpopt.solvers import objective_perturbation as op_module
from dpopt.solvers.objective_perturbation import (
    InexactSolveError,
    certified_minimize,
    certify_point,
    guaranteed_iterations,
)

BUDGET = Budget(1.0, 1e-6)


def _data(n: int = 300, p: int = 5, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, p))
    X /= np.maximum(1.0, np.linalg.norm(X, axis=1, keepdims=True))
    y = np.where(X[:, 0] + 0.3 * rng.normal(size=n) > 0, 1.0, -1.0)
    return X, y


PROBLEMS = {
    "objective_perturbation": [
        ERMProblem("logistic", DataBounds(1.0)),
        ERMProblem("logistic", DataBounds(1.0), L2Ball(5, 2.0)),
    ],
    "output_perturbation": [
        ERMProblem("logistic", DataBounds(1.0), l2_penalty=0.05),
        ERMProblem("logistic", DataBounds(1.0), L2Ball(5, 0.5), l2_penalty=0.05),
    ],
}
CASES = [(m, i) for m, probs in PROBLEMS.items() for i in range(len(probs))]


def _no_fallback(monkeypatch: pytest.MonkeyPatch) -> None:
    """Disable the public projected-gradient phase (as if its guaranteed count were unavailable)."""

    def stops_at_once(grad_fn, project, x0, smoothness, iterations, stop):
        return project(x0), 0, False

    monkeypatch.setattr(op_module, "_projected_gradient", stops_at_once)


@pytest.mark.parametrize("method, which", CASES)
def test_a_solver_forced_to_stop_early_is_completed_by_the_public_phase_and_certified(method, which):
    # max_iter=2 stops the accelerated solver; the projected-gradient phase, whose length depends
    # only on declared constants (and the noise), then certifies tol: the release keeps its guarantee
    X, y = _data()
    prob = PROBLEMS[method][which]
    res = minimize(prob, X, y, method=method, budget=BUDGET, rng=0, max_iter=2, diagnostics=True)
    assert res.status == "converged" and res.privacy.sound
    assert res.privacy.epsilon <= BUDGET.epsilon * (1 + 1e-9)
    assert res.nonprivate_diagnostics["inner_residual"] <= res.parameters["inner_tol"]
    assert res.nonprivate_diagnostics["inner_iterations"] > 2
    if prob.constraint is not None:
        assert prob.constraint.contains(res.solution, tol=1e-9)


@pytest.mark.parametrize("method, which", CASES)
def test_an_uncertified_solve_releases_nothing_and_spends_the_committed_budget(method, which, monkeypatch):
    _no_fallback(monkeypatch)
    X, y = _data()
    prob = PROBLEMS[method][which]
    acct = make_accountant("pld", budget=Budget(2.0, 1e-5), neighbouring="replace_one")
    with pytest.raises(InexactSolveError, match=r"max_iterations=2.*nothing was released") as info:
        minimize(prob, X, y, method=method, budget=BUDGET, rng=0, max_iter=2, accountant=acct)
    assert isinstance(info.value, DPOptError)
    assert acct.n_events >= 1  # paid before any noise was drawn; a refusal does not refund it
    # the accelerated solver alone certifies with the default cap
    res = minimize(prob, X, y, method=method, budget=BUDGET, rng=0)
    assert res.status == "converged" and res.privacy.sound


@pytest.mark.parametrize("calibration", ["kst", "paper"])
def test_paper_calibrations_also_refuse_an_uncertified_solve(calibration, monkeypatch):
    _no_fallback(monkeypatch)
    X, y = _data()
    prob = PROBLEMS["objective_perturbation"][0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the paper calibrations' own PrivacyClaimWarning
        with pytest.raises(InexactSolveError):
            minimize(
                prob,
                X,
                y,
                method="objective_perturbation",
                budget=BUDGET,
                rng=0,
                calibration=calibration,
                max_iter=2,
            )


def test_guaranteed_iterations_certify_the_worst_case_quadratic_and_fewer_do_not():
    # J(θ) = (μ/2)θ₁² + (β/2)θ₂²: gradient steps 1/β shrink θ₁ by exactly 1 − μ/β; the count
    # uses sqrt(1 − μ/β) (valid for every smooth strongly convex J), so it is never short
    mu, beta, d0, tol = 0.01, 1.0, 10.0, 1e-8
    k = guaranteed_iterations(beta, mu, d0, tol, constrained=False)
    assert k is not None

    def grad(x):
        return np.array([mu * x[0], beta * x[1]])

    def run(steps):
        x = np.array([d0, 0.0])
        for _ in range(steps):
            x = x - grad(x) / beta
        return float(np.linalg.norm(grad(x)))

    assert run(k) <= tol
    exact = math.ceil(math.log(mu * d0 / tol) / -math.log1p(-mu / beta))  # the true count on this J
    assert run(exact) <= tol < run(exact - 1)
    assert exact <= k <= 2 * math.ceil(math.log(beta * d0 / tol) / -math.log1p(-mu / beta)) + 1
    assert guaranteed_iterations(beta, mu, math.inf, tol, constrained=False) is None


def test_non_private_runs_only_warn(monkeypatch):
    X, y = _data()
    # no ridge: no strong convexity, so no guaranteed phase; the run warns and says so
    with pytest.warns(ConvergenceWarning, match="non-private"):
        res = minimize(PROBLEMS["objective_perturbation"][0], X, y, budget="non-private", rng=0, max_iter=2)
    assert res.status == "max_iter" and np.isinf(res.privacy.epsilon)
    _no_fallback(monkeypatch)
    with pytest.warns(ConvergenceWarning, match="non-private"):
        res = minimize(
            PROBLEMS["output_perturbation"][0],
            X,
            y,
            method="output_perturbation",
            budget="non-private",
            rng=0,
            max_iter=2,
        )
    assert res.status == "max_iter"


def test_the_solvers_own_claim_is_not_trusted(monkeypatch):
    # Planted bug: an inner solver that stops at once and claims convergence.  The certificate is
    # recomputed at the point that would be released, so the run refuses.
    def lying_fista(fun, grad_fn, project, x0, lipschitz, **_):
        return project(x0), 1, 0.0, True

    monkeypatch.setattr(op_module, "fista", lying_fista)
    # the unconstrained solves start from an L-BFGS point; planted here as a start that is far off
    monkeypatch.setattr(op_module, "_lbfgs_warm_start", lambda fun, grad_fn, x0, tol, its: (x0 + 1.0, 1))
    _no_fallback(monkeypatch)
    X, y = _data()
    for method, probs in PROBLEMS.items():
        with pytest.raises(InexactSolveError):
            minimize(probs[0], X, y, method=method, budget=BUDGET, rng=0)


def _logistic_objective(X, y, lam, b):
    def fun(t):
        return float(np.logaddexp(0.0, -y * (X @ t)).mean() + 0.5 * lam * t @ t + b @ t)

    def grad(t):
        s = -y / (1.0 + np.exp(y * (X @ t)))
        return X.T @ s / len(y) + lam * t + b

    return fun, grad


@pytest.mark.parametrize("constrained", [False, True])
def test_certified_distance_bound_holds_and_a_halved_bound_fails(constrained):
    X, y = _data(n=200, p=4, seed=1)
    lam, beta = 0.05, 0.25 + 0.05
    b = np.array([0.3, -0.2, 0.1, 0.0])
    fun, grad = _logistic_objective(X, y, lam, b)
    ball = L2Ball(4, 0.4)
    project = ball.project if constrained else None
    exact = certified_minimize(fun, grad, project, np.zeros(4), beta, lam, tol=1e-13, max_iterations=100_000)
    assert exact.certified
    star = exact.point
    rng = np.random.default_rng(0)
    ratios = []
    for scale in (1e-1, 1e-2, 1e-3):
        for _ in range(20):
            x = star + scale * rng.normal(size=4)
            if constrained:
                x = ball.project(x)
            point, _g, dist = certify_point(x, grad(x), project, beta, lam)
            actual = float(np.linalg.norm(point - star))
            assert actual <= dist * (1 + 1e-9) + 1e-12
            ratios.append(actual / dist)
    assert max(ratios) <= 1.0
    # power: on J(θ) = (μ/2)‖θ‖² the unconstrained bound G/μ is attained, so half of it fails
    mu = 0.05
    q_point, _q_g, q_dist = certify_point(np.array([1.0, 0.0]), np.array([mu, 0.0]), None, 1.0, mu)
    assert np.linalg.norm(q_point) == pytest.approx(q_dist)
    assert np.linalg.norm(q_point) > q_dist / 2


def test_output_sensitivity_covers_certified_inexact_points_and_the_exact_term_alone_does_not():
    # Worst-case pair of neighbours (one feature x = 1, one label flipped, strong regularisation):
    # the exact minimisers are ≈ 2L_R/(nλ) apart.  Points whose certified gradient norm is tol,
    # pushed apart along the line, are further apart than that but within the sensitivity with the
    # 2·tol/λ term (a planted bug dropping the term would fail).
    n, lam, tol = 4, 10.0, 0.1
    prob = ERMProblem("logistic", DataBounds(1.0), None, l2_penalty=lam)
    X = np.ones((n, 1))
    y0, y1 = np.ones(n), np.ones(n)
    y1[-1] = -1.0
    s0 = minimize(prob, X, y0, method="output_perturbation", budget="non-private", rng=0, tol=1e-12)
    s1 = minimize(prob, X, y1, method="output_perturbation", budget="non-private", rng=0, tol=1e-12)
    t0, t1 = float(s0.solution[0]), float(s1.solution[0])
    direction = np.sign(t0 - t1)

    def pushed(theta_star, yy, sign):
        # the point on the far side of θ* whose gradient norm is exactly tol
        def h(s):
            return abs(float(prob.gradient(np.array([theta_star + sign * s]), X, yy)[0])) - tol

        s = optimize.brentq(h, 0.0, 1.0, xtol=1e-15)
        return theta_star + sign * s

    a, c = pushed(t0, y0, direction), pushed(t1, y1, -direction)
    for pt, yy in ((a, y0), (c, y1)):
        _point, g, _ = certify_point(np.array([pt]), prob.gradient(np.array([pt]), X, yy), None, 1.0, lam)
        assert g <= tol * (1 + 1e-9)
    full = minimize(prob, X, y0, method="output_perturbation", budget="non-private", rng=0, tol=tol)
    sens_full = full.parameters["sensitivity"]
    sens_exact_only = sens_full - 2 * tol / lam
    assert abs(a - c) <= sens_full
    assert abs(a - c) > sens_exact_only


def test_objective_perturbation_output_noise_is_calibrated_to_the_declared_tolerance():
    X, y = _data()
    prob = PROBLEMS["objective_perturbation"][0]
    tight = minimize(prob, X, y, method="objective_perturbation", budget=BUDGET, rng=0)
    loose = minimize(prob, X, y, method="objective_perturbation", budget=BUDGET, rng=0, tol=1e-4)
    mu = tight.parameters["regularization"] + prob.l2_penalty
    assert tight.parameters["output_sensitivity"] == pytest.approx(2 * 1e-10 / mu)
    assert loose.parameters["output_sensitivity"] == pytest.approx(2 * 1e-4 / mu)
    assert loose.parameters["output_sigma"] == pytest.approx(1e6 * tight.parameters["output_sigma"], rel=0.01)
    for r in (tight, loose):
        assert r.privacy.sound and r.privacy.epsilon <= BUDGET.epsilon * (1 + 1e-9)
    ball = minimize(
        PROBLEMS["objective_perturbation"][1], X, y, method="objective_perturbation", budget=BUDGET, rng=0
    )
    mu_b = ball.parameters["regularization"]
    assert ball.parameters["output_sensitivity"] == pytest.approx(4 * 1e-10 / mu_b)


def test_paper_calibration_true_epsilon_includes_the_output_noise():
    X, y = _data()
    prob = PROBLEMS["objective_perturbation"][0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = minimize(prob, X, y, method="objective_perturbation", budget=BUDGET, rng=0, calibration="paper")
    assert res.privacy.epsilon == pytest.approx(BUDGET.epsilon)
    assert res.privacy.true_epsilon > BUDGET.epsilon  # the seed's smaller noise is not (1, 1e-6)-DP
