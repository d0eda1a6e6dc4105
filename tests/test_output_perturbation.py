"""Output perturbation (Chaudhuri et al. 2011) and the χ₂ calibration of objective perturbation."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from scipy import integrate, special

from dpopt.accounting import Budget, make_accountant
from dpopt.audit import audit
from dpopt.exceptions import BudgetExceededError, InvalidParameterError
from dpopt.problems import DataBounds, ERMProblem, L2Ball
from dpopt.solvers import available_methods, minimize
from dpopt.solvers.objective_perturbation import (
    chi2_delta,
    replace_one_calibration,
    replace_one_epsilon,
)
from dpopt.solvers.output_perturbation import output_perturbation_sensitivity, solution_radius

BUDGET = Budget(1.0, 1e-6)


def _data(n=300, p=5, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, p))
    X /= np.maximum(1.0, np.linalg.norm(X, axis=1, keepdims=True))
    y = np.where(X[:, 0] + 0.3 * rng.normal(size=n) > 0, 1.0, -1.0)
    return X, y


def _hand_radius(B: float, lam: float) -> float:
    """Fixed point of R = B·expit(B·R)/λ from above (logistic loss, ±1 labels)."""
    R = B / lam
    for _ in range(10_000):
        R = B * special.expit(B * R) / lam
    return R


@pytest.mark.parametrize("B, lam", [(1.0, 1.0), (1.118, 11.0), (2.0, 0.05)])
def test_sensitivity_matches_hand_computation(B, lam):
    n, tol = 400, 1e-10
    prob = ERMProblem("logistic", DataBounds(B), None, l2_penalty=lam)
    R = _hand_radius(B, lam)
    L = B * special.expit(B * R)
    radius, lip = solution_radius(prob, 3)
    assert radius == pytest.approx(R, rel=1e-6)
    assert lip == pytest.approx(L, rel=1e-6)
    assert output_perturbation_sensitivity(prob, n, 3, tol=tol) == pytest.approx(
        2 * L / (n * lam) + 2 * tol / lam,
        rel=1e-6,  # unconstrained: ‖θ̂ − θ*‖ <= tol/λ per dataset
    )
    if lam >= 10:  # strongly regularised: the Lipschitz bound is close to B/2, not B
        assert lip < 0.6 * B


def test_minimisers_of_neighbours_are_within_the_sensitivity_and_the_bound_is_nearly_attained():
    # One feature x = 1, labels +1; the neighbour flips one label.  Strong regularisation makes the
    # minimiser ≈ mean(y)/(2λ), so the flip moves it by ≈ 1/(nλ) ≈ the declared Δ = 2 L_R/(nλ).
    n, lam = 4, 10.0
    prob = ERMProblem("logistic", DataBounds(1.0), None, l2_penalty=lam)
    X = np.ones((n, 1))
    y0 = np.ones(n)
    y1 = y0.copy()
    y1[-1] = -1.0
    r0 = minimize(prob, X, y0, method="output_perturbation", budget="non-private", rng=0)
    r1 = minimize(prob, X, y1, method="output_perturbation", budget="non-private", rng=0)
    dist = float(np.linalg.norm(r0.solution - r1.solution))
    sens = r0.parameters["sensitivity"]
    assert dist <= sens
    assert dist >= 0.9 * sens  # a sensitivity half as large (a planted 2x bug) would fail above


def test_random_neighbours_stay_within_the_sensitivity():
    X, y = _data(n=60, p=4, seed=3)
    rng = np.random.default_rng(0)
    for lam in (0.05, 1.0):
        prob = ERMProblem("logistic", DataBounds(1.0), None, l2_penalty=lam)
        base = minimize(prob, X, y, method="output_perturbation", budget="non-private", rng=0)
        for _ in range(5):
            X1, y1 = X.copy(), y.copy()
            i = rng.integers(len(y))
            v = rng.normal(size=4)
            X1[i] = v / np.linalg.norm(v)
            y1[i] = -y1[i]
            other = minimize(prob, X1, y1, method="output_perturbation", budget="non-private", rng=0)
            assert np.linalg.norm(other.solution - base.solution) <= base.parameters["sensitivity"]


def test_noise_off_matches_sklearn_and_constrained_ball_is_respected():
    from sklearn.linear_model import LogisticRegression

    X, y = _data()
    lam = 0.05
    prob = ERMProblem("logistic", DataBounds(1.0), None, l2_penalty=lam)
    res = minimize(prob, X, y, method="output_perturbation", budget="non-private", rng=0)
    sk = LogisticRegression(C=1 / (lam * len(y)), fit_intercept=False, tol=1e-12, max_iter=10_000).fit(X, y)
    np.testing.assert_allclose(res.solution, sk.coef_.ravel(), atol=1e-6)
    assert math.isinf(res.privacy.epsilon)
    ball = ERMProblem("logistic", DataBounds(1.0), L2Ball(5, 0.5), l2_penalty=lam)
    rb = minimize(ball, X, y, method="output_perturbation", budget="non-private", rng=0)
    assert np.linalg.norm(rb.solution) <= 0.5 + 1e-9


def test_privacy_spent_within_budget_composed_before_noise_and_same_seed_same_result():
    X, y = _data()
    prob = ERMProblem("logistic", DataBounds(1.0), None, l2_penalty=1.0)
    res = minimize(prob, X, y, method="output_perturbation", budget=BUDGET, rng=7)
    assert res.privacy.epsilon <= BUDGET.epsilon * (1 + 1e-9)
    assert res.privacy.true_epsilon <= BUDGET.epsilon * (1 + 1e-9)
    assert res.privacy.neighbouring == "replace_one" and res.status == "converged"
    again = minimize(prob, X, y, method="output_perturbation", budget=BUDGET, rng=7)
    np.testing.assert_array_equal(res.solution, again.solution)
    assert "output_perturbation" in available_methods()
    acct = make_accountant("pld", budget=Budget(0.5, 1e-6), neighbouring="replace_one")
    gen = np.random.default_rng(5)
    state = gen.bit_generator.state
    with pytest.raises(BudgetExceededError):
        minimize(prob, X, y, method="output_perturbation", budget=BUDGET, rng=gen, accountant=acct)
    assert gen.bit_generator.state == state and acct.n_events == 0


def test_bad_input_raises():
    X, y = _data()
    with pytest.raises(InvalidParameterError, match="l2_penalty"):
        minimize(
            ERMProblem("logistic", DataBounds(1.0)), X, y, method="output_perturbation", budget=BUDGET, rng=0
        )
    prob = ERMProblem("logistic", DataBounds(1.0), None, l2_penalty=1.0)
    with pytest.raises(InvalidParameterError, match="calibration"):
        minimize(prob, X, y, method="output_perturbation", budget=BUDGET, rng=0, calibration="paper")


def test_audit_finds_no_violation():
    prob = ERMProblem("logistic", DataBounds(1.0), None, l2_penalty=10.0)
    d0 = (np.ones((4, 1)), np.ones(4))
    d1 = (np.ones((4, 1)), np.array([1.0, 1.0, 1.0, -1.0]))

    def mech(data, rng):
        X, y = data
        return minimize(prob, X, y, method="output_perturbation", budget=BUDGET, rng=rng).solution[0]

    assert not audit(mech, d0, d1, n_runs=2000, delta=BUDGET.delta, rng=1).refutes(BUDGET.epsilon)


# ------------------------------------------------------------ objective perturbation's χ₂ calibration
@pytest.mark.parametrize("z, eps2", [(40.0, 0.09), (9.0, 0.45), (1.1, 4.5), (0.5, 0.1)])
def test_chi2_delta_matches_numerical_integral_and_beats_the_tail_bound(z, eps2):
    def integrand(r: float) -> float:
        return max(0.0, 1 - math.exp(eps2 - r / z - 1 / (2 * z * z))) * r * math.exp(-r * r / 2)

    num, _ = integrate.quad(integrand, 0, 60, limit=400, points=[max(z * eps2 - 1 / (2 * z), 0.0)])
    assert chi2_delta(z, eps2) == pytest.approx(num, rel=1e-6, abs=1e-14)
    # never worse than the χ₂ tail bound P(R > t) = exp(-t²/2) at the same ε₂
    t = (eps2 - 1 / (2 * z * z)) * z
    if t > 0:
        assert chi2_delta(z, eps2) <= math.exp(-t * t / 2)


def test_replace_one_calibration_gives_less_noise_and_reallocates_a_large_penalty():
    kw: dict[str, Any] = {"lipschitz": 1.0, "hessian": 0.25, "n": 500}
    for eps in (0.1, 0.5, 2.0):
        sigma, ridge = replace_one_calibration(eps, 1e-5, jacobian_fraction=0.1, **kw)
        t = math.sqrt(2 * math.log(1e5))
        eps2 = 0.9 * eps
        z_tail = (t + math.sqrt(t * t + 2 * eps2)) / (2 * eps2)
        assert sigma < z_tail * 2 / 500  # strictly less noise than the tail-bound calibration
        assert replace_one_epsilon(sigma, ridge, delta=1e-5, **kw) == pytest.approx(eps, rel=1e-9)
        big = 100 * ridge
        s2, r2 = replace_one_calibration(eps, 1e-5, jacobian_fraction=0.1, l2_penalty=big, **kw)
        assert r2 == big and s2 < sigma
        assert replace_one_epsilon(s2, r2, delta=1e-5, **kw) == pytest.approx(eps, rel=1e-9)
