"""Contract tests of the private ERM solvers (mirror descent, objective perturbation, Frank-Wolfe)."""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np
import pytest
import scipy.sparse
from scipy.optimize import minimize as sp_minimize

from dpopt.accounting import Budget, make_accountant
from dpopt.exceptions import (
    BoundsViolationError,
    BudgetExceededError,
    InvalidParameterError,
    MissingDataBoundsError,
    PrivacyClaimWarning,
)
from dpopt.problems import (
    DataBounds,
    ERMProblem,
    GroupL1Ball,
    InterpolationBall,
    L1Ball,
    L2Ball,
    NuclearBall,
    Polytope,
    Simplex,
)
from dpopt.solvers import OptimizeResult, available_methods, minimize, register_method

BUDGET = Budget(1.0, 1e-6)


def _logistic_data(n=600, p=8, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, p))
    X /= np.maximum(1.0, np.linalg.norm(X, axis=1, keepdims=True))
    w = rng.normal(size=p) * 2
    y = np.where(rng.random(n) < 1 / (1 + np.exp(-X @ w)), 1.0, -1.0)
    return X, y


def _lasso_data(n=800, p=10, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.choice([-1.0, 1.0], size=(n, p))
    th = np.zeros(p)
    th[:3] = [0.5, -0.3, 0.2]
    y = np.clip(X @ th + 0.1 * rng.normal(size=n), -1, 1)
    return X, y


def _reference(prob: ERMProblem, X, y):
    """Non-private optimum by SLSQP (independent of dpopt's solvers)."""
    p = X.shape[1]
    C = prob.constraint
    f = lambda t: prob.objective(t, X, y)  # noqa: E731
    g = lambda t: prob.gradient(t, X, y)  # noqa: E731
    if C is None:
        res = sp_minimize(f, np.zeros(p), jac=g, method="L-BFGS-B", options={"gtol": 1e-12, "ftol": 1e-15})
        return res.x, res.fun
    if isinstance(C, L1Ball):
        # θ = u - v, u, v >= 0, Σ(u + v) <= r
        def f2(w):
            return f(w[:p] - w[p:])

        def g2(w):
            gg = g(w[:p] - w[p:])
            return np.concatenate([gg, -gg])

        cons = [{"type": "ineq", "fun": lambda w: C.radius_l1 - w.sum(), "jac": lambda w: -np.ones(2 * p)}]
        res = sp_minimize(
            f2,
            np.zeros(2 * p),
            jac=g2,
            bounds=[(0, None)] * (2 * p),
            constraints=cons,
            method="SLSQP",
            options={"ftol": 1e-15, "maxiter": 1000},
        )
        return res.x[:p] - res.x[p:], res.fun
    cons = [{"type": "ineq", "fun": lambda t: C.radius_l2**2 - t @ t, "jac": lambda t: -2 * t}]
    res = sp_minimize(
        f, np.zeros(p), jac=g, constraints=cons, method="SLSQP", options={"ftol": 1e-15, "maxiter": 1000}
    )
    return res.x, res.fun


# ------------------------------------------------------------------ noise off = non-private optimum
def test_objective_perturbation_noise_off_matches_sklearn():
    from sklearn.linear_model import LogisticRegression

    X, y = _logistic_data()
    lam = 1e-2
    prob = ERMProblem("logistic", DataBounds(1.0), None, l2_penalty=lam)
    res = minimize(prob, X, y, method="objective_perturbation", budget="non-private", rng=0)
    sk = LogisticRegression(C=1 / (lam * len(y)), fit_intercept=False, tol=1e-12, max_iter=10_000).fit(X, y)
    np.testing.assert_allclose(res.solution, sk.coef_.ravel(), atol=1e-6)
    assert math.isinf(res.privacy.epsilon) and res.calibration == "none"


@pytest.mark.parametrize("C", [L2Ball(8, 0.5), L1Ball(8, 0.5)], ids=["l2", "l1"])
def test_objective_perturbation_noise_off_constrained(C):
    X, y = _logistic_data()
    prob = ERMProblem("logistic", DataBounds(1.0), C)
    res = minimize(prob, X, y, method="objective_perturbation", budget=(math.inf, 0.0), rng=0)
    _, fref = _reference(prob, X, y)
    assert prob.objective(res.solution, X, y) - fref < 1e-8


def test_frank_wolfe_noise_off_lasso():
    X, y = _lasso_data()
    prob = ERMProblem("squared", DataBounds(1.0, "linf", 1.0), L1Ball(10, 1.0))
    _, fref = _reference(prob, X, y)
    for gram in (True, False):
        res = minimize(
            prob, X, y, method="frank_wolfe", budget="non-private", rng=0, iterations=2000, gram=gram
        )
        assert prob.objective(res.solution, X, y) - fref < 2e-4


@pytest.mark.parametrize(
    ("C", "potential"),
    [
        (L2Ball(8, 1.0), "euclidean"),
        (L1Ball(8, 1.0), "entropy"),
        (L1Ball(8, 1.0), "lq"),
        (L1Ball(8, 1.0), "euclidean"),
        (GroupL1Ball(8, 2, 1.0), "group"),
        (NuclearBall(2, 4, 1.0), "spectral"),
    ],
)
def test_mirror_descent_noise_off(C, potential):
    X, y = _logistic_data()
    prob = ERMProblem("logistic", DataBounds(1.0), C)
    if isinstance(C, L1Ball | L2Ball):
        _, fref = _reference(prob, X, y)
    else:  # exact projected solve (checked against SLSQP on the balls above)
        ref = minimize(prob, X, y, method="objective_perturbation", budget="non-private", rng=0)
        fref = prob.objective(ref.solution, X, y)
    res = minimize(
        prob,
        X,
        y,
        method="mirror_descent",
        budget="non-private",
        rng=0,
        potential=potential,
        iterations=1500 if potential != "lq" else 500,
        step_size=2.0 if potential != "lq" else 0.5,
    )
    assert prob.objective(res.solution, X, y) - fref < 5e-3
    assert C.contains(res.solution, tol=1e-8)


@pytest.mark.parametrize(
    "C",
    [L2Ball(8, 1.0), GroupL1Ball(8, 2, 1.0), NuclearBall(2, 4, 1.0), InterpolationBall(8, 0.5, 1.0)],
    ids=lambda c: type(c).__name__,
)
def test_gaussian_frank_wolfe_noise_off(C):
    X, y = _logistic_data()
    prob = ERMProblem("logistic", DataBounds(1.0), C)
    ref = minimize(prob, X, y, method="objective_perturbation", budget="non-private", rng=0)
    res = minimize(prob, X, y, method="frank_wolfe", budget="non-private", rng=0, iterations=2000)
    assert res.parameters["variant"] == "gaussian"
    assert prob.objective(res.solution, X, y) - prob.objective(ref.solution, X, y) < 1e-3


def test_gram_path_equals_direct_path():
    X, y = _lasso_data(n=300, p=12)
    prob = ERMProblem("squared", DataBounds(1.0, "linf", 1.0), L1Ball(12, 1.0))
    a = minimize(prob, X, y, method="frank_wolfe", budget=BUDGET, rng=3, gram=True, iterations=300)
    b = minimize(prob, X, y, method="frank_wolfe", budget=BUDGET, rng=3, gram=False, iterations=300)
    c = minimize(
        prob, scipy.sparse.csr_matrix(X), y, method="frank_wolfe", budget=BUDGET, rng=3, iterations=300
    )
    assert a.parameters["gram"] and not b.parameters["gram"]
    np.testing.assert_allclose(a.solution, b.solution, atol=1e-10)
    np.testing.assert_allclose(c.solution, b.solution, atol=1e-10)


# ------------------------------------------------------------------ privacy contracts
CASES = [
    ("mirror_descent", "logistic", L2Ball(8), "tight"),
    ("mirror_descent", "logistic", L1Ball(8), "paper"),
    ("mirror_descent", "logistic", GroupL1Ball(8, 2), "tight"),
    ("mirror_descent", "logistic", NuclearBall(2, 4), "tight"),
    ("objective_perturbation", "logistic", L2Ball(8), "tight"),
    ("frank_wolfe", "squared", L1Ball(8), "tight"),
    ("frank_wolfe", "squared", L1Ball(8), "conservative"),
    ("frank_wolfe", "logistic", L2Ball(8), "tight"),
    ("frank_wolfe", "logistic", Simplex(8), "tight"),
    ("frank_wolfe", "logistic", L2Ball(8), "paper"),
]


@pytest.mark.parametrize(("method", "loss", "C", "cal"), CASES)
def test_privacy_spent_within_budget_and_reproducible(method, loss, C, cal):
    X, y = _logistic_data(n=400)
    prob = ERMProblem(loss, DataBounds(1.0, label_bound=1.0), C)
    kw = {"method": method, "budget": BUDGET, "calibration": cal, "max_iter": 300}
    a = minimize(prob, X, y, rng=11, **kw)
    b = minimize(prob, X, y, rng=11, **kw)
    c = minimize(prob, X, y, rng=12, **kw)
    assert isinstance(a, OptimizeResult)
    assert a.privacy.true_epsilon <= BUDGET.epsilon * (1 + 1e-9)
    assert a.privacy.delta <= BUDGET.delta
    assert a.privacy.neighbouring == "replace_one"
    np.testing.assert_array_equal(a.solution, b.solution)
    assert not np.array_equal(a.solution, c.solution)
    assert C.contains(a.solution, tol=1e-8)
    assert a.nonprivate_diagnostics == {}
    with pytest.raises((TypeError, ValueError)):
        a.solution[0] = 1.0


@pytest.mark.parametrize(
    ("method", "loss", "C", "cal"),
    [
        ("frank_wolfe", "squared", L1Ball(8), "paper"),
        ("objective_perturbation", "logistic", L2Ball(8), "paper"),
        ("objective_perturbation", "logistic", L2Ball(8), "kst"),
    ],
)
def test_paper_calibration_warns_and_reports_true_epsilon(method, loss, C, cal):
    X, y = _logistic_data(n=400)
    prob = ERMProblem(loss, DataBounds(1.0, label_bound=1.0), C)
    opts: dict[str, Any] = {"max_iter": 200} if method == "frank_wolfe" else {}
    with pytest.warns(PrivacyClaimWarning, match="true figure"):
        res = minimize(prob, X, y, method=method, budget=BUDGET, rng=0, calibration=cal, **opts)
    assert not res.privacy.sound
    assert res.privacy.true_epsilon > 1.2 * BUDGET.epsilon


def test_objective_perturbation_replace_one_calibration_round_trip():
    from dpopt.solvers.objective_perturbation import replace_one_calibration, replace_one_epsilon

    for eps, frac in [(0.1, 0.1), (1.0, 0.3), (5.0, 0.5)]:
        sigma, ridge = replace_one_calibration(
            eps, 1e-6, lipschitz=1.5, hessian=0.5, n=1000, jacobian_fraction=frac
        )
        back = replace_one_epsilon(sigma, ridge, lipschitz=1.5, hessian=0.5, n=1000, delta=1e-6)
        assert math.isclose(back, eps, rel_tol=1e-9)


def test_paper_mirror_descent_is_sound_and_reports_verified_epsilon():
    X, y = _logistic_data(n=400)
    prob = ERMProblem("logistic", DataBounds(1.0), L2Ball(8))
    with warnings.catch_warnings():
        warnings.simplefilter("error", PrivacyClaimWarning)
        res = minimize(prob, X, y, method="mirror_descent", budget=BUDGET, rng=0, calibration="paper")
    assert res.privacy.sound and res.privacy.verified_epsilon is not None
    assert res.privacy.verified_epsilon < BUDGET.epsilon


def test_budget_is_composed_before_any_noise_is_drawn():
    X, y = _logistic_data(n=400)
    prob = ERMProblem("logistic", DataBounds(1.0), L2Ball(8))
    acct = make_accountant("pld", budget=Budget(0.5, 1e-6), neighbouring="replace_one")
    gen = np.random.default_rng(5)
    state = gen.bit_generator.state
    with pytest.raises(BudgetExceededError):
        minimize(prob, X, y, method="mirror_descent", budget=BUDGET, rng=gen, accountant=acct)
    assert gen.bit_generator.state == state
    assert acct.n_events == 0
    # within budget: the caller's ledger records the run
    acct2 = make_accountant("pld", budget=Budget(2.0, 1e-5), neighbouring="replace_one")
    minimize(prob, X, y, method="objective_perturbation", budget=BUDGET, rng=0, accountant=acct2)
    assert acct2.n_events == 1 and acct2.epsilon() <= 1.0 + 1e-6


def test_tight_beats_paper_at_equal_privacy():
    X, y = _logistic_data(n=2000, p=10, seed=1)
    C = L2Ball(10, 1.0)
    prob = ERMProblem("logistic", DataBounds(1.0), C)
    _, fref = _reference(prob, X, y)
    excess = {}
    for cal in ("tight", "paper"):
        vals = []
        for seed in range(4):
            r = minimize(
                prob, X, y, method="mirror_descent", budget=Budget(0.5, 1e-6), rng=seed, calibration=cal
            )
            vals.append(prob.objective(r.solution, X, y) - fref)
        excess[cal] = float(np.mean(vals))
    assert excess["tight"] < 0.5 * excess["paper"]


def test_diagnostics_are_separate_and_labelled():
    X, y = _logistic_data(n=300)
    prob = ERMProblem("logistic", DataBounds(1.0), L2Ball(8))
    res = minimize(prob, X, y, method="mirror_descent", budget=BUDGET, rng=0, diagnostics=True, iterations=20)
    assert set(res.nonprivate_diagnostics) >= {"objective", "gradient_norm"}
    assert "objective" not in res.parameters
    assert res.iterations == 20 and res.status == "completed" and res.success
    assert "mirror_descent" in repr(res)


# ------------------------------------------------------------------ validation
def test_validation_errors():
    X, y = _logistic_data(n=100)
    prob = ERMProblem("logistic", DataBounds(1.0), L2Ball(8))
    with pytest.raises(InvalidParameterError, match="budget"):
        minimize(prob, X, y, budget=None, rng=0)
    with pytest.raises(InvalidParameterError, match="method"):
        minimize(prob, X, y, method="sgd??", budget=BUDGET, rng=0)
    with pytest.raises(InvalidParameterError, match="calibration"):
        minimize(prob, X, y, method="mirror_descent", budget=BUDGET, rng=0, calibration="loose")
    with pytest.raises(InvalidParameterError, match="replace_one"):
        minimize(prob, X, y, method="mirror_descent", budget=BUDGET, rng=0, accountant=make_accountant("pld"))
    with pytest.raises(InvalidParameterError, match="δ > 0"):
        minimize(prob, X, y, method="mirror_descent", budget=Budget(1.0, 0.0), rng=0)
    with pytest.raises(InvalidParameterError, match="potential"):
        minimize(prob, X, y, method="mirror_descent", budget=BUDGET, rng=0, potential="entropy")
    with pytest.raises(InvalidParameterError, match="polytope"):
        minimize(prob, X, y, method="frank_wolfe", budget=BUDGET, rng=0, variant="polytope")
    with pytest.raises(MissingDataBoundsError):
        minimize(
            ERMProblem("logistic", DataBounds(), L2Ball(8)),
            X,
            y,
            method="mirror_descent",
            budget=BUDGET,
            rng=0,
        )
    with pytest.raises(BoundsViolationError):
        minimize(ERMProblem("logistic", DataBounds(0.1), L2Ball(8)), X, y, budget=BUDGET, rng=0)
    with pytest.raises(InvalidParameterError, match="bounded"):
        minimize(ERMProblem("logistic", DataBounds(1.0)), X, y, method="mirror_descent", budget=BUDGET, rng=0)
    with pytest.raises(InvalidParameterError, match="3 vertices"):
        minimize(
            ERMProblem("logistic", DataBounds(1.0), Simplex(8).__class__(2)),
            X[:, :2],
            y,
            method="mirror_descent",
            budget=BUDGET,
            rng=0,
            potential="lq",
        )


def test_auto_method_and_registry():
    X, y = _lasso_data(n=200, p=6)
    prob = ERMProblem("squared", DataBounds(1.0, "linf", 1.0), L1Ball(6))
    assert minimize(prob, X, y, budget=BUDGET, rng=0).method == "dp_frank_wolfe"
    assert {"mirror_descent", "frank_wolfe", "objective_perturbation"} <= set(available_methods())
    with pytest.raises(InvalidParameterError):
        register_method("frank_wolfe", "dpopt.solvers.frank_wolfe:private_frank_wolfe")
    poly = Polytope(np.vstack([np.eye(6), -np.eye(6)]))
    res = minimize(
        ERMProblem("squared", DataBounds(1.0, "linf", 1.0), poly),
        X,
        y,
        budget=BUDGET,
        rng=0,
        method="frank_wolfe",
        iterations=50,
    )
    assert res.parameters["variant"] == "polytope"


def test_secure_rng_runs():
    X, y = _logistic_data(n=200)
    prob = ERMProblem("logistic", DataBounds(1.0), L2Ball(8))
    res = minimize(prob, X, y, method="mirror_descent", budget=BUDGET, rng="secure", iterations=5)
    assert np.all(np.isfinite(res.solution))


def _mirror_objective(geom, potential, lin):
    if potential == "entropy":

        def psi(a):
            return float(np.sum(a * np.log(np.maximum(a, 1e-300))))
    else:

        def psi(a):
            return geom.c * float(np.sum(np.abs(a) ** geom.q)) ** (2 / geom.q)

    def obj(a):
        return psi(a) - float(lin @ a)

    return obj


@pytest.mark.parametrize("potential", ["entropy", "lq"])
def test_lifted_mirror_step_agrees_with_generic_solver(potential):
    from dpopt.solvers.mirror_descent import _geometry

    C = L1Ball(3, 1.0)  # k = 6 vertices
    geom: Any = _geometry(C, potential)
    rng = np.random.default_rng(0)
    state = geom.init()
    cons = [{"type": "eq", "fun": lambda a: a.sum() - 1}]
    for _ in range(3):
        h = rng.normal(size=3)
        eta = 0.7
        new = geom.step(state, h, eta)
        alpha_old = np.exp(state) if potential == "entropy" else state
        alpha_new = np.exp(new) if potential == "entropy" else new
        assert np.all(alpha_new >= -1e-15) and abs(alpha_new.sum() - 1) < 1e-12
        s = C.vertex_scores(h)
        grad_old = np.log(alpha_old) if potential == "entropy" else geom._grad(alpha_old)
        obj = _mirror_objective(geom, potential, grad_old - eta * s)
        ref = sp_minimize(
            obj,
            np.full(6, 1 / 6),
            bounds=[(1e-12, 1)] * 6,
            constraints=cons,
            method="SLSQP",
            options={"ftol": 1e-14, "maxiter": 500},
        )
        assert obj(alpha_new) <= ref.fun + 1e-7
        state = new
