"""Sufficient-statistics perturbation for least squares (``method="ssp"``, AdaSSP)."""

from __future__ import annotations

import numpy as np
import pytest

from dpopt.accounting import Budget
from dpopt.exceptions import InvalidParameterError
from dpopt.problems import DataBounds, ERMProblem
from dpopt.solvers import minimize


def test_ssp_sensitivities_are_attained_by_a_worst_pair() -> None:
    from dpopt.solvers.sufficient_statistics import ssp_sensitivities

    B, Y = 2.0, 3.0
    d_gram, d_lin, d_min = ssp_sensitivities(B, Y)
    x, x2 = np.array([B, 0.0]), np.array([0.0, B])  # orthogonal rows of norm B
    diff = np.outer(x, x) - np.outer(x2, x2)
    assert np.linalg.norm(diff[np.triu_indices(2)]) == pytest.approx(d_gram)
    assert np.linalg.norm(x * Y - x * (-Y)) == pytest.approx(d_lin)
    assert np.linalg.norm(diff, 2) == pytest.approx(d_min)


def _reference(prob: ERMProblem, X: np.ndarray, y: np.ndarray, radius: float) -> np.ndarray:
    from scipy.optimize import minimize as sp_minimize

    ref = sp_minimize(lambda t: prob.objective(t, X, y), np.zeros(X.shape[1]), jac=lambda t: prob.gradient(t, X, y),
                      constraints=[{"type": "ineq", "fun": lambda t: radius**2 - t @ t}], method="SLSQP",
                      options={"ftol": 1e-15, "maxiter": 500})  # fmt: skip
    return np.asarray(ref.x)


def test_ssp_noise_off_is_the_constrained_least_squares_solution_and_private_run_is_charged() -> None:
    from dpopt.accounting import PldAccountant
    from dpopt.problems import L2Ball

    rng = np.random.default_rng(4)
    X = rng.uniform(-1, 1, (300, 4)) / 2
    y = np.clip(X @ np.array([2.0, -1.0, 0.5, 0.0]) + 0.05 * rng.normal(size=300), -1, 1)
    for radius in (0.5, 10.0):  # active and inactive ball
        prob = ERMProblem("squared", DataBounds(1.0, label_bound=1.0), L2Ball(4, radius))
        res = minimize(prob, X, y, method="ssp", budget="non-private", rng=0)
        ref = _reference(prob, X, y, radius)
        assert np.linalg.norm(res.solution - ref) < 1e-5
        assert np.linalg.norm(res.solution) <= radius * (1 + 1e-12)
    acct = PldAccountant(neighbouring="replace_one")
    gen = np.random.default_rng(1)
    priv = minimize(prob, X, y, method="ssp", budget=Budget(1.0, 1e-5), rng=gen, accountant=acct)
    assert acct.n_events == 1 and priv.privacy.epsilon <= 1.0 + 1e-9
    z = priv.parameters["noise_multiplier"]
    assert priv.parameters["sigma_xty"] == pytest.approx(z * 2 * 1.0 * 1.0 * np.sqrt(3))
    assert priv.parameters["ridge"] > 0 and priv.parameters["ridge_rule"] == "adaptive"
    with pytest.raises(InvalidParameterError, match="δ > 0"):
        minimize(prob, X, y, method="ssp", budget=Budget(1.0, 0.0), rng=0)
    with pytest.raises(InvalidParameterError, match="does not support the LogisticLoss"):
        minimize(ERMProblem("logistic", DataBounds(1.0), L2Ball(4, 1.0)), X, np.sign(y) + (y == 0),
                 method="ssp", budget=Budget(1.0, 1e-5), rng=0)  # fmt: skip


def test_linear_regression_default_is_ssp_with_delta_and_objective_perturbation_without() -> None:
    from dpopt.estimators import DPLinearRegression

    rng = np.random.default_rng(2)
    X = rng.uniform(-1, 1, (400, 3))
    y = np.clip(X @ np.array([0.3, -0.2, 0.1]) + 0.05 * rng.normal(size=400), -1, 1)
    kw = {"feature_norm": 1.0, "norm": "linf", "label_bound": 1.0, "rng": 0}
    a = DPLinearRegression(epsilon=0.2, **kw).fit(X, y)  # ε·n/√d = 0.2·400/2 = 40 < 100
    assert a.solver_ == "ssp" and a.privacy_spent_.epsilon <= 0.2 + 1e-9
    assert a.result_.parameters["sensitivities"][1] == pytest.approx(2 * 2.0 * 1.0)  # B = √4 (intercept col)
    c = DPLinearRegression(epsilon=1.0, **kw).fit(X, y)  # 1·400/2 = 200 >= 100
    assert c.solver_ == "dp_mag" and c.privacy_spent_.epsilon <= 1.0 + 1e-9
    b = DPLinearRegression(epsilon=1.0, delta=0.0, **kw).fit(X, y)
    assert b.solver_ == "objective_perturbation" and b.privacy_spent_.delta == 0.0
