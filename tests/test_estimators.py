"""Tests of the scikit-learn compatible private estimators."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.utils.estimator_checks import parametrize_with_checks

from dpopt.accounting import PrivacySpent
from dpopt.estimators import DPLasso, DPLinearRegression, DPLogisticRegression
from dpopt.exceptions import BoundsViolationError, MissingDataBoundsError


def _check_instances():
    # The checks use standardized data; bounds that fit it (with opt-in clipping) and a large ε
    # let the accuracy checks (score > 0.5 / 0.83) pass despite the privacy noise.
    common: dict[str, Any] = {"clip": True, "rng": 0, "epsilon": 100.0}
    return [
        DPLogisticRegression(feature_norm=10.0, l2_penalty=0.05, **common),
        DPLinearRegression(feature_norm=5.0, label_bound=3.0, max_norm=5.0, **common),
        DPLasso(feature_norm=3.0, label_bound=3.0, radius=3.0, solver_options={"iterations": 50}, **common),
    ]


EXPECTED_FAILURES: dict[str, str] = {
    # Private fits at a finite budget are not exact least-squares / logistic fits.
}


@parametrize_with_checks(_check_instances(), expected_failed_checks=lambda est: EXPECTED_FAILURES)
def test_sklearn_contract(estimator, check):
    check(estimator)


def _breast_cancer_standardized():
    """Features mapped to [-1, 1] by the declared per-feature maxima, rows scaled to l2 norm <= 1."""
    from sklearn import datasets as skd

    from dpopt.datasets import BREAST_CANCER_DECLARED_MAXIMA

    b = skd.load_breast_cancer()
    M = np.asarray(BREAST_CANCER_DECLARED_MAXIMA)
    X = (2 * np.clip(b.data / M, 0, 1) - 1) / np.sqrt(M.size)
    return X, b.target


def test_logistic_regression_accuracy_and_privacy_on_breast_cancer():
    from sklearn.model_selection import train_test_split

    X, y = _breast_cancer_standardized()
    accs = []
    for seed in range(5):
        Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.2, random_state=seed)
        est = DPLogisticRegression(epsilon=1.0, delta=1e-5, feature_norm=1.0, rng=seed).fit(Xtr, ytr)
        accs.append(est.score(Xte, yte))
        assert isinstance(est.privacy_spent_, PrivacySpent)
        assert est.privacy_spent_.true_epsilon <= 1.0 + 1e-9
        assert est.predict_proba(Xte).shape == (len(yte), 2)
    assert np.mean(accs) > 0.8  # diffprivlib measured about 0.63-0.80 here (see benchmarks/bench_erm.py)


def test_estimators_require_bounds_and_check_them():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(50, 3))
    y = (X[:, 0] > 0).astype(int)
    with pytest.raises(MissingDataBoundsError):
        DPLogisticRegression(rng=0).fit(X, y)
    with pytest.raises(BoundsViolationError):
        DPLogisticRegression(feature_norm=0.1, rng=0).fit(X, y)
    with pytest.raises(MissingDataBoundsError):
        DPLasso(feature_norm=5.0, rng=0).fit(X, X[:, 0])
    est = DPLogisticRegression(feature_norm=0.1, clip=True, rng=0).fit(X, y)
    assert est.coef_.shape == (3,)


def test_estimator_same_seed_same_model_and_noise_off():
    rng = np.random.default_rng(1)
    X = rng.uniform(-1, 1, size=(200, 4)) / 2
    y = np.clip(X @ np.array([0.5, -0.5, 0.0, 0.0]), -1, 1)
    kw: dict[str, Any] = {
        "feature_norm": 0.5,
        "norm": "linf",
        "label_bound": 1.0,
        "radius": 1.0,
        "fit_intercept": False,
    }
    a = DPLasso(rng=3, **kw).fit(X, y)
    b = clone(a).fit(X, y)
    np.testing.assert_array_equal(a.coef_, b.coef_)
    exact = DPLasso(epsilon=math.inf, solver_options={"iterations": 3000}, **kw).fit(X, y)
    assert math.isinf(exact.privacy_spent_.epsilon)
    np.testing.assert_allclose(exact.coef_, [0.5, -0.5, 0.0, 0.0], atol=2e-3)
    lin = DPLinearRegression(feature_norm=1.0, label_bound=1.0, epsilon=math.inf, rng=0).fit(X, y)
    assert lin.score(X, y) > 0.99


def _breast_cancer_accuracy(eps: float, seeds: int) -> tuple[float, list[Any]]:
    from sklearn.model_selection import train_test_split

    X, y = _breast_cancer_standardized()
    accs, ests = [], []
    for seed in range(seeds):
        Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.2, random_state=seed)
        est = DPLogisticRegression(epsilon=eps, delta=1e-5, feature_norm=1.0, rng=seed).fit(Xtr, ytr)
        assert est.privacy_spent_.epsilon <= eps * (1 + 1e-9)
        assert est.privacy_spent_.true_epsilon <= eps * (1 + 1e-9)
        accs.append(est.score(Xte, yte))
        ests.append(est)
    return float(np.mean(accs)), ests


@pytest.mark.parametrize(
    "eps, floor",
    [
        # issue 4's diffprivlib figures are 0.63 (ε = 0.1, about the majority-class rate) and 0.80
        # (ε = 1).  The former defaults (output / objective perturbation) gave 0.665 and 0.822 on 50
        # of these splits; the DP-SGD default 0.706 and 0.910 on the first 20 (s.e. about 0.017).
        (0.1, 0.67),
        (1.0, 0.87),
    ],
)
def test_breast_cancer_accuracy_regression_beats_issue_figures(eps, floor):
    mean, ests = _breast_cancer_accuracy(eps, 20)
    assert all(e.solver_ == "dp_sgd" for e in ests)
    assert mean > floor


def test_auto_solver_and_defaults_depend_only_on_public_quantities():
    rng = np.random.default_rng(0)
    X = rng.uniform(-1, 1, size=(400, 3)) / 2
    y = (X[:, 0] > 0).astype(int)
    small = DPLogisticRegression(epsilon=0.2, feature_norm=1.0, rng=0).fit(X, y)  # ε·n/√d = 40
    assert small.solver_ == "dp_sgd" and small.l2_penalty_ == 0.0
    p = small.result_.parameters
    B = math.hypot(1.0, 0.5)  # feature_norm and the intercept column 0.5
    # public hyper-parameters: batch √n, 20 epochs, clip B/2, the noise-scaled constant step
    assert p["batch_size"] == 20 and small.n_iter_ == 400 and p["clip"] == pytest.approx(B / 2)
    assert p["neighbouring"] == "replace_one" and p["sampling_rate"] == pytest.approx(20 / 400)
    assert small.privacy_spent_.true_epsilon <= 0.2 * (1 + 1e-9)
    # the rule reads n, d and ε only: permuting or changing the labels moves neither it nor the step
    other = DPLogisticRegression(epsilon=0.2, feature_norm=1.0, rng=0).fit(X[::-1], 1 - y[::-1])
    assert other.solver_ == small.solver_ and other.result_.parameters["step_first"] == p["step_first"]
    # objective perturbation from ε·n/√d = 6500 on (here ε = 40: 8000)
    large = DPLogisticRegression(epsilon=40.0, feature_norm=1.0, rng=0).fit(X, y)
    assert large.solver_ == "objective_perturbation" and large.l2_penalty_ == 0.0
    paper = DPLogisticRegression(epsilon=0.2, feature_norm=1.0, calibration="kst", rng=0)
    with pytest.warns(Warning):
        paper.fit(X, y)
    assert paper.solver_ == "objective_perturbation"
    explicit = DPLogisticRegression(
        epsilon=0.2, feature_norm=1.0, solver="output_perturbation", l2_penalty=2.0, rng=0
    ).fit(X, y)
    assert explicit.l2_penalty_ == 2.0
    with pytest.raises(Exception, match="l2_penalty"):
        DPLogisticRegression(
            epsilon=0.2, feature_norm=1.0, solver="output_perturbation", l2_penalty=0.0, rng=0
        ).fit(X, y)


def test_pure_epsilon_default_works_and_learns():
    """``delta=0`` (issue 13): objective perturbation's pure-ε form (l2-Laplace noise), not an error."""
    from sklearn.model_selection import train_test_split

    X, y = _breast_cancer_standardized()
    accs = []
    for seed in range(10):
        Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.3, random_state=seed)
        est = DPLogisticRegression(epsilon=2.0, delta=0.0, feature_norm=1.0, rng=seed).fit(Xtr, ytr)
        assert est.solver_ == "objective_perturbation"
        assert est.privacy_spent_.delta == 0.0 and est.privacy_spent_.epsilon <= 2.0 * (1 + 1e-9)
        assert est.result_.parameters["noise"] == "l2_laplace"
        accs.append(est.score(Xte, yte))
    # measured 0.87 (majority class 0.63); diffprivlib's pure-ε figure at ε = 2 is 0.76 (issue 13)
    assert np.mean(accs) > 0.8


def test_estimator_errors_speak_in_estimator_terms() -> None:
    """A bounds violation names clip=True and an unknown solver names solver=, not minimize()'s keywords."""
    from dpopt.estimators import DPLogisticRegression
    from dpopt.exceptions import BoundsViolationError, InvalidParameterError

    X = np.random.default_rng(0).normal(size=(40, 3)) * 3
    y = (X[:, 0] > 0).astype(int)
    with pytest.raises(BoundsViolationError, match=r"clip=True") as info:
        DPLogisticRegression(epsilon=1.0, feature_norm=1.0).fit(X, y)
    assert "DataBounds" not in str(info.value)
    with pytest.raises(InvalidParameterError, match=r"^DPLogisticRegression: solver: unknown"):
        DPLogisticRegression(epsilon=1.0, feature_norm=1.0, clip=True, solver="nope").fit(X, y)


# --- the accountant's relation and the estimator's (issue 26) -------------------------------------


def _relation_estimators(**kw: Any) -> list[Any]:
    return [
        DPLogisticRegression(feature_norm=1.0, rng=0, **kw),
        DPLogisticRegression(feature_norm=1.0, delta=0.0, rng=0, **kw),
        DPLinearRegression(feature_norm=1.0, label_bound=1.0, rng=0, **kw),
        DPLasso(feature_norm=1.0, label_bound=1.0, rng=0, **kw),
    ]


def _relation_data(d: int = 3) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    X = rng.uniform(-1, 1, size=(200, d)) / math.sqrt(d)
    return X, (X[:, 0] > 0).astype(float)


@pytest.mark.parametrize("explicit", ["replace_one", "add_remove"])
def test_an_explicit_relation_other_than_the_accountants_is_refused_by_name(explicit: str) -> None:
    from dpopt.accounting import make_accountant
    from dpopt.exceptions import InvalidParameterError

    other = "add_remove" if explicit == "replace_one" else "replace_one"
    for d in (3, 320):  # 320 columns: DPLinearRegression's private-selection path
        X, y = _relation_data(d)
        for est in _relation_estimators(neighbouring=explicit, declared_size=None):
            acct = make_accountant("pld", neighbouring=other)  # type: ignore[arg-type]
            est.set_params(accountant=acct)
            with pytest.raises(InvalidParameterError) as info:
                est.fit(X, y)
            msg = str(info.value)
            assert f"{type(est).__name__} was asked for neighbouring={explicit!r}" in msg
            assert f"created with neighbouring={other!r}" in msg
            assert f"make_accountant(..., neighbouring={explicit!r})" in msg
            assert len(acct.ledger) == 0  # refused before anything was composed


def test_a_default_relation_follows_the_accountant_and_the_size_error_says_so() -> None:
    from dpopt.accounting import Budget, make_accountant
    from dpopt.exceptions import InvalidParameterError
    from dpopt.problems import DataBounds, ERMProblem
    from dpopt.solvers import minimize

    X, y = _relation_data()
    for est in _relation_estimators():
        acct = make_accountant()  # add/remove by default
        est.set_params(accountant=acct)
        with pytest.raises(InvalidParameterError, match="declared_size") as info:
            est.fit(X, y)
        assert "comes from the accountant=" in str(info.value)
        assert "make_accountant(..., neighbouring='replace_one')" in str(info.value)
        # with a declared size the default follows the accountant: an add/remove fit
        est.set_params(declared_size=200).fit(X, y)
        assert est.privacy_spent_.neighbouring == "add_remove" and len(acct.ledger) == 1
    prob = ERMProblem("logistic", DataBounds(1.0), None)
    ys = np.where(y > 0, 1.0, -1.0)
    with pytest.raises(InvalidParameterError, match="comes from the accountant="):
        minimize(prob, X, ys, budget=Budget(1.0, 1e-5), accountant=make_accountant(), rng=0)
    with pytest.raises(InvalidParameterError, match="minimize was asked for neighbouring='replace_one'"):
        minimize(
            prob,
            X,
            ys,
            budget=Budget(1.0, 1e-5),
            accountant=make_accountant(),
            rng=0,
            neighbouring="replace_one",
        )


# --- δ against the public n (issue 26) -----------------------------------------------------------


def test_delta_at_least_one_over_the_public_n_warns_once_and_never_reads_the_private_size() -> None:
    import warnings

    from dpopt.exceptions import LargeDeltaWarning
    from dpopt.problems import DataBounds, ERMProblem
    from dpopt.solvers import minimize

    X, y = _relation_data()  # 200 rows
    X, y = X[:50], y[:50]
    for est in _relation_estimators(clip=True):
        if est.delta == 0:
            continue
        est.set_params(delta=0.1)
        with pytest.warns(LargeDeltaWarning, match=r"n=50 \(the number of rows") as caught:
            est.fit(X, y)
        assert sum(issubclass(w.category, LargeDeltaWarning) for w in caught) == 1  # once per fit
    prob = ERMProblem("logistic", DataBounds(1.0, clip=True), None)
    ys = np.where(y > 0, 1.0, -1.0)
    with pytest.warns(LargeDeltaWarning, match="minimize: delta=0.1"):
        minimize(prob, X, ys, budget=(1.0, 0.1), rng=0)
    add_remove = {"neighbouring": "add_remove", "rng": 0}
    with pytest.warns(LargeDeltaWarning, match=r"n=1000 \(declared_size\)"):
        minimize(prob, X, ys, budget=(1.0, 0.1), declared_size=1000, **add_remove)
    with warnings.catch_warnings():
        warnings.simplefilter("error", LargeDeltaWarning)
        # add/remove: only the declared size counts (0.1 < 1/5), never the data's 50 rows
        minimize(prob, X, ys, budget=(1.0, 0.1), declared_size=5, **add_remove)
        minimize(prob, X, ys, budget=(1.0, 0.1), sampling_rate=0.5, batch_size=25, **add_remove)
        minimize(prob, X, ys, budget=(1.0, 0.01), rng=0)  # 0.01 < 1/50
