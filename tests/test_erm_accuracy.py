"""Accuracy of the defaults (issue 13): the default beats the trivial predictor at ε = 1 and improves
with ε on average (fixed seeds, honest tolerances; small tasks so the file runs in seconds)."""

from __future__ import annotations

import numpy as np
import pytest

from dpopt.accounting import Budget
from dpopt.problems import DataBounds, ERMProblem, L1Ball
from dpopt.solvers import minimize
from dpopt.solvers.frank_wolfe_tuned import planned_steps


def _sparse_lasso(seed: int, n: int = 2000, d: int = 100, k: int = 5) -> tuple[np.ndarray, ...]:
    r = np.random.default_rng(seed)
    X = r.uniform(-1, 1, (2 * n, d))
    w = np.zeros(d)
    w[r.choice(d, k, replace=False)] = r.choice([-1.0, 1.0], k) / k
    y = np.clip(X @ w + r.normal(0, 0.1, 2 * n), -1, 1)
    return X[:n], y[:n], X[n:], y[n:]


LASSO = ERMProblem("squared", DataBounds(1.0, "linf", 1.0), L1Ball(100, 1.0))


def _lasso_mse(eps: float, delta: float, seeds: range) -> np.ndarray:
    out = []
    for s in seeds:
        Xtr, ytr, Xte, yte = _sparse_lasso(s)
        res = minimize(LASSO, Xtr, ytr, budget=Budget(eps, delta), rng=s)
        assert res.method == "dp_frank_wolfe"
        assert np.abs(res.solution).sum() <= 1.0 + 1e-9
        out.append(np.mean((Xte @ res.solution - yte) ** 2))
    return np.array(out)


@pytest.mark.parametrize("delta", [1e-5, 0.0])
def test_default_lasso_beats_zero_predictor_and_improves_with_epsilon(delta: float) -> None:
    seeds = range(6)
    zero = np.mean([np.mean(_sparse_lasso(s)[3] ** 2) for s in seeds])
    mse = {eps: _lasso_mse(eps, delta, seeds).mean() for eps in (0.25, 1.0, 4.0)}
    # at ε = 1 at least halfway from the zero predictor (≈ 0.077) to the optimum (≈ 0.01) with δ > 0
    # (measured 0.016); pure ε composes linearly and gets fewer steps (measured 0.037)
    assert mse[1.0] < (0.5 if delta > 0 else 0.65) * zero, (mse, zero)
    # monotone on average, with a tolerance of 0.005 (the seed-to-seed s.e. is ≈ 0.002)
    assert mse[0.25] >= mse[1.0] - 0.005 and mse[1.0] >= mse[4.0] - 0.005, mse


def test_planned_steps_grow_with_the_budget_and_are_public() -> None:
    ts = [planned_steps(3500, eps, 1e-5, 0.25) for eps in (0.1, 0.5, 1.0, 2.0, 5.0)]
    assert ts == sorted(ts) and ts[0] == 3 and ts[-1] < 40
    assert planned_steps(3500, 1.0, 0.0, 0.25) < planned_steps(3500, 1.0, 1e-5, 0.25)


def test_residual_clip_lowers_the_sensitivity() -> None:
    Xtr, ytr, _, _ = _sparse_lasso(0, n=300)
    a = minimize(LASSO, Xtr, ytr, method="dp_frank_wolfe", budget=Budget(1.0, 1e-5), rng=0, max_iter=5)
    b = minimize(
        LASSO,
        Xtr,
        ytr,
        method="dp_frank_wolfe",
        budget=Budget(1.0, 1e-5),
        rng=0,
        max_iter=5,
        residual_clip=None,
    )
    # declared |φ'| <= x∞·r + |y| = 2; the default clip is label_bound / 4 = 0.25: 8x less noise
    assert a.parameters["sensitivity"] == pytest.approx(b.parameters["sensitivity"] / 8)
    assert a.parameters["noise_scale"] == pytest.approx(b.parameters["noise_scale"] / 8, rel=0.02)
    assert a.privacy.epsilon <= 1.0 and b.privacy.epsilon <= 1.0


def test_pure_objective_perturbation_calibration_adds_up() -> None:
    import math

    from dpopt.solvers.objective_perturbation import pure_calibration

    alpha, zeta = pure_calibration(1.0, lipschitz=1.2, hessian=0.3, n=500, jacobian_fraction=0.1)
    assert math.log1p(0.3 / (500 * zeta)) + 2 * alpha * 1.2 / 500 == pytest.approx(1.0)
    prob = ERMProblem("logistic", DataBounds(1.0))
    r = np.random.default_rng(0)
    X = r.normal(size=(300, 3)) / 3
    X /= np.maximum(1, np.linalg.norm(X, axis=1, keepdims=True))
    y = np.sign(X[:, 0] + 0.01)
    res = minimize(prob, X, y, method="objective_perturbation", budget=Budget(1.0, 0.0), rng=0)
    assert res.privacy.delta == 0.0 and res.privacy.epsilon <= 1.0 + 1e-9
    assert res.parameters["noise"] == "l2_laplace"


def _dense_regression(seed: int, n: int = 2000, d: int = 20) -> tuple[np.ndarray, ...]:
    r = np.random.default_rng(100 + seed)
    X = r.uniform(-1, 1, (2 * n, d))
    w = r.normal(0, 1, d)
    w *= 0.6 / np.linalg.norm(w)
    y = np.clip(X @ w + r.normal(0, 0.1, 2 * n), -1, 1)
    return X[:n], y[:n], X[n:], y[n:]


def test_default_linear_regression_beats_zero_predictor_and_improves_with_epsilon() -> None:
    """DPLinearRegression's default for δ > 0 on [-1, 1]^20 rows declared coordinate-wise."""
    from dpopt.estimators import DPLinearRegression

    seeds = range(4)
    zero = np.mean([np.mean(_dense_regression(s, n=1000)[3] ** 2) for s in seeds])
    mse: dict[float, float] = {}
    for eps in (0.1, 1.0, 4.0):
        vals = []
        for s in seeds:
            Xtr, ytr, Xte, yte = _dense_regression(s, n=1000)
            m = DPLinearRegression(epsilon=eps, feature_norm=1.0, norm="linf", label_bound=1.0, rng=s)
            m.fit(Xtr, ytr)
            # ε·n/√d = ε·1000/√21: below 100 at ε = 0.1 (21.8), where ε·n/(d·B₂²) = 0.23 < 1 picks
            # Frank-Wolfe over the l1 ball; dp_mag from ε = 1 (218)
            assert m.solver_ == ("dp_frank_wolfe" if eps < 0.5 else "dp_mag")
            vals.append(np.mean((m.predict(Xte) - yte) ** 2))
        mse[eps] = float(np.mean(vals))
    # zero predictor 0.129; measured 0.129 / 0.027 / 0.013 (s.e. 0.007 / 0.004 / 0.001) at ε = 0.1 / 1 / 4
    # (the former default, objective perturbation, gave 0.41 / 0.29 / 0.071 at ε = 0.25 / 1 / 4, n = 2000)
    assert mse[1.0] < 0.4 * zero, (mse, zero)
    assert mse[0.1] < 1.15 * zero and mse[0.1] >= mse[1.0] - 0.005 and mse[1.0] >= mse[4.0] - 0.005, mse


@pytest.mark.parametrize("dense", [True, False])
def test_pure_epsilon_linear_regression_default_beats_zero_predictor(dense: bool) -> None:
    """DPLinearRegression(delta=0): never worse than the zero predictor, better at ε = 4, monotone.

    Objective perturbation, the former pure-ε default, gave 5.5x the zero predictor's MSE on the
    benchmark's [-1, 1]^500 task; here (d = 20, n = 1000) it is picked only where ε·n/(d·B₂²) >= 25.
    """
    from dpopt.estimators import DPLinearRegression

    seeds = range(4)
    data = [_dense_regression(s, n=1000) if dense else _sparse_lasso(s, n=1000, d=20) for s in seeds]
    zero = float(np.mean([np.mean(d[3] ** 2) for d in data]))
    mse: dict[float, float] = {}
    for eps in (0.25, 1.0, 4.0):
        vals = []
        for s, (Xtr, ytr, Xte, yte) in zip(seeds, data, strict=True):
            m = DPLinearRegression(
                epsilon=eps, delta=0.0, feature_norm=1.0, norm="linf", label_bound=1.0, rng=s
            ).fit(Xtr, ytr)
            assert m.solver_ == "dp_frank_wolfe"  # ε·n/(d·B₂²) = ε·1000/21² <= 9.1 < 25
            assert m.privacy_spent_.delta == 0.0 and m.privacy_spent_.epsilon <= eps + 1e-9
            vals.append(np.mean((m.predict(Xte) - yte) ** 2))
        mse[eps] = float(np.mean(vals))
    assert all(v <= 1.05 * zero for v in mse.values()), (mse, zero)
    # measured (4 seeds): dense 0.129 / 0.112 / 0.062, sparse 0.075 / 0.070 / 0.015 at ε = 0.25 / 1 / 4
    assert mse[4.0] < (0.6 if dense else 0.3) * zero, (mse, zero)
    assert mse[0.25] >= mse[1.0] - 0.005 and mse[1.0] >= mse[4.0] - 0.005, mse


def test_pure_epsilon_linear_regression_rule_switches_to_objective_perturbation() -> None:
    from dpopt.estimators import AUTO_LINEAR_PURE_OP_EPSILON_N, DPLinearRegression

    Xtr, ytr, _, _ = _dense_regression(0, n=1000)
    kw = dict(delta=0.0, feature_norm=1.0, norm="linf", label_bound=1.0, fit_intercept=False, rng=0)
    eps_switch = AUTO_LINEAR_PURE_OP_EPSILON_N * 20 * 20 / 1000  # ε·n/(d·d·x∞²) = 25
    assert DPLinearRegression(epsilon=eps_switch, **kw).fit(Xtr, ytr).solver_ == "objective_perturbation"
    assert DPLinearRegression(epsilon=0.99 * eps_switch, **kw).fit(Xtr, ytr).solver_ == "dp_frank_wolfe"
    # declared l2 rows: B₂ = feature_norm, so the same ε·n/d is 20x larger
    Xl2 = Xtr / np.sqrt(20)
    kw2 = {**kw, "norm": "l2"}
    assert DPLinearRegression(epsilon=0.5, **kw2).fit(Xl2, ytr).solver_ == "objective_perturbation"


# ------------------------------------------------------------------------------------------------ logistic

B_AUG = float(np.hypot(1.0, 0.5))  # rows of norm <= 1 and an intercept column 0.5
LOGISTIC = ERMProblem("logistic", DataBounds(B_AUG))


def _classification(seed: int, n: int = 600, d: int = 6) -> tuple[np.ndarray, ...]:
    r = np.random.default_rng(200 + seed)
    X = r.normal(size=(2 * n, d))
    X /= np.maximum(1.0, np.linalg.norm(X, axis=1))[:, None]
    X[:, -1] = 0.5  # the intercept column
    y = np.where(X[:, :-1] @ np.linspace(1.0, -1.0, d - 1) + 0.3 + 0.3 * r.normal(size=2 * n) > 0, 1.0, -1.0)
    return X[:n], y[:n], X[n:], y[n:]


@pytest.mark.parametrize("relation", ["replace_one", "add_remove"])
def test_default_logistic_beats_the_majority_class_and_improves_with_epsilon(relation: str) -> None:
    """``method="auto"`` for a logistic problem (DP-SGD), under each neighbouring relation."""
    seeds = range(4)
    majority = np.mean([max(np.mean(t[3] > 0), np.mean(t[3] < 0)) for t in map(_classification, seeds)])
    acc: dict[float, float] = {}
    for eps in (0.25, 1.0, 4.0):
        vals = []
        for s in seeds:
            Xtr, ytr, Xte, yte = _classification(s)
            kw = {"neighbouring": "add_remove", "declared_size": len(ytr)} if relation == "add_remove" else {}
            res = minimize(LOGISTIC, Xtr, ytr, budget=Budget(eps, 1e-5), rng=s, **kw)  # type: ignore[arg-type]
            assert res.method == "dp_sgd" and res.privacy.neighbouring == relation
            assert res.privacy.epsilon <= eps * (1 + 1e-9)
            vals.append(np.mean(np.where(Xte @ res.solution > 0, 1.0, -1.0) == yte))
        acc[eps] = float(np.mean(vals))
    # measured (majority 0.64): replace-one 0.80 / 0.85 / 0.88, add/remove 0.86 / 0.86 / 0.88
    assert acc[1.0] > majority + 0.15, (acc, majority)
    # monotone on average, with a tolerance of 0.01 (the seed-to-seed s.e. is 0.01-0.03)
    assert acc[0.25] <= acc[1.0] + 0.01 and acc[1.0] <= acc[4.0] + 0.01, acc


@pytest.mark.parametrize("relation", ["replace_one", "add_remove"])
def test_pure_epsilon_logistic_estimator_never_below_the_class_prior_and_improves(relation: str) -> None:
    """``DPLogisticRegression(delta=0)``: the class prior at ε·n < 100, objective perturbation above
    (its replace-one or add/remove form), beating the majority class at ε = 1 and monotone."""
    from dpopt.estimators import DPLogisticRegression

    seeds = range(4)
    data = [_classification(s) for s in seeds]
    majority = np.mean([max(np.mean(t[3] > 0), np.mean(t[3] < 0)) for t in data])
    acc: dict[float, float] = {}
    for eps in (0.1, 0.25, 1.0, 4.0):
        vals, solvers = [], set()
        for s, (Xtr, ytr, Xte, yte) in zip(seeds, data, strict=True):
            kw = {"neighbouring": "add_remove", "declared_size": len(ytr)} if relation == "add_remove" else {}
            est = DPLogisticRegression(epsilon=eps, delta=0.0, feature_norm=1.0, rng=s, **kw)  # type: ignore[arg-type]
            est.fit(Xtr[:, :-1], ytr)
            assert est.privacy_spent_.neighbouring == relation and est.privacy_spent_.delta == 0.0
            vals.append(est.score(Xte[:, :-1], yte))
            solvers.add(est.solver_)
        assert solvers == ({"class_prior"} if eps * 600 < 100 else {"objective_perturbation"}), (eps, solvers)
        acc[eps] = float(np.mean(vals))
    # measured (majority 0.645): replace-one 0.645 / 0.778 / 0.869 / 0.882, add/remove 0.645 / 0.844 / 0.881 / 0.881
    assert acc[0.1] >= majority - 0.01, (acc, majority)  # the class prior is the majority class
    assert acc[1.0] > majority + 0.1, (acc, majority)
    assert acc[0.25] <= acc[1.0] + 0.01 and acc[1.0] <= acc[4.0] + 0.01, acc


def test_logistic_auto_rule_reads_public_quantities_only() -> None:
    from dpopt.solvers.minimize import LOGISTIC_CLIP_FRACTION, logistic_sgd_by_default

    Xtr, ytr, _, _ = _classification(0, n=400)
    a = minimize(LOGISTIC, Xtr, ytr, budget=Budget(1.0, 1e-5), rng=0)
    # the same n, d and budget with other values (labels flipped, rows permuted): the same plan
    b = minimize(LOGISTIC, Xtr[::-1], -ytr[::-1], budget=Budget(1.0, 1e-5), rng=0)
    for key in ("batch_size", "sampling_rate", "clip", "step_first", "noise_scales", "average"):
        assert a.parameters[key] == b.parameters[key], key
    assert a.parameters["batch_size"] == 20 and a.nit == 400
    assert a.parameters["clip"] == pytest.approx(LOGISTIC_CLIP_FRACTION * B_AUG)
    # pure ε: objective perturbation's l2-Laplace form; large ε·n/√d: objective perturbation
    assert minimize(LOGISTIC, Xtr, ytr, budget=Budget(1.0, 0.0), rng=0).method == "objective_perturbation"
    assert logistic_sgd_by_default(Budget(1.0, 1e-5), "tight", 400, 6)
    assert not logistic_sgd_by_default(Budget(50.0, 1e-5), "tight", 400, 6)  # 50·400/√6 = 8165
    assert not logistic_sgd_by_default(Budget(1.0, 1e-5), "paper", 400, 6)


def test_noise_scaled_step_shrinks_with_the_noise_and_is_full_without_it() -> None:
    from dpopt.solvers.gradient import NOISE_SCALED_STEP, dp_gd

    Xtr, ytr, _, _ = _classification(1, n=300)
    kw = {"batch_size": 17, "iterations": 200, "step": "noise_scaled", "step_scale": 2.0, "clip": 0.5}
    steps = {}
    for eps in (0.2, 1.0, 20.0):
        res = dp_gd(LOGISTIC, Xtr, ytr, budget=Budget(eps, 1e-5), rng=0, **kw)  # type: ignore[arg-type]
        r = res.parameters["noise_scales"][0] / res.parameters["per_example_bound_l2"]
        assert res.parameters["step_first"] == pytest.approx(2.0 * min(1.0, NOISE_SCALED_STEP / r))
        steps[eps] = res.parameters["step_first"]
    assert steps[0.2] < steps[1.0] < steps[20.0] == pytest.approx(2.0)
    free = dp_gd(LOGISTIC, Xtr, ytr, budget="non-private", rng=0, **kw)  # type: ignore[arg-type]
    assert free.parameters["step_first"] == 2.0
