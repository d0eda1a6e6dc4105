"""The private class prior (issue 13: pure ε at very small ε·n never below the trivial predictor)."""

from __future__ import annotations

import numpy as np
import pytest

import dpopt.solvers.class_prior as class_prior_module
from dpopt.accounting import Budget, LaplaceEvent, make_accountant
from dpopt.audit import audit_outputs
from dpopt.estimators import AUTO_CLASS_PRIOR_EPSILON_N, DPLogisticRegression
from dpopt.exceptions import BoundsViolationError, BudgetExceededError, InvalidParameterError
from dpopt.solvers.class_prior import private_class_prior


def _labels(pos: int, neg: int) -> np.ndarray:
    return np.array([1.0] * pos + [-1.0] * neg)


@pytest.mark.parametrize("neighbouring", ["replace_one", "add_remove"])
def test_release_is_committed_before_noise_and_reports_epsilon(neighbouring: str) -> None:
    ledger = make_accountant("pld", neighbouring=neighbouring)
    res = private_class_prior(
        _labels(70, 30), 4, budget=Budget(0.5, 0.0), rng=0, intercept_value=0.5,
        neighbouring=neighbouring, accountant=ledger,
    )  # fmt: skip
    assert res.method == "class_prior"
    assert res.privacy.epsilon == pytest.approx(0.5) and res.privacy.delta == 0.0
    assert res.privacy.neighbouring == neighbouring
    assert len(ledger.ledger) == 1 and ledger.ledger[0].event == LaplaceEvent(scale=2.0, sensitivity=1.0)
    assert np.all(res.solution[:-1] == 0.0) and res.solution[-1] > 0  # 70 % positives


def test_over_budget_accountant_refuses_before_any_draw() -> None:
    ledger = make_accountant("pld", budget=Budget(0.1, 0.0), neighbouring="replace_one")

    class Exploding:  # any draw would fail the test
        def __getattr__(self, name: str) -> None:
            raise AssertionError("noise drawn before the release was paid for")

    with pytest.raises(BudgetExceededError):
        private_class_prior(_labels(5, 5), 2, budget=Budget(1.0, 0.0), rng=Exploding(), accountant=ledger)
    assert len(ledger.ledger) == 0


def test_bad_labels_are_refused_without_echoing_them() -> None:
    with pytest.raises(InvalidParameterError, match=r"\{-1, \+1\}") as info:
        private_class_prior(np.array([0.0, 7.25]), 2, budget=Budget(1.0, 0.0), rng=0)
    assert "7.25" not in str(info.value)


def _outputs(y: np.ndarray, neighbouring: str, eps: float, runs: int) -> np.ndarray:
    rng = np.random.default_rng(12345 + y.size)
    return np.array([
        private_class_prior(y, 1, budget=Budget(eps, 0.0), rng=rng, neighbouring=neighbouring).solution[0]
        for _ in range(runs)
    ])  # fmt: skip


@pytest.mark.parametrize("neighbouring", ["replace_one", "add_remove"])
def test_audit_passes_and_a_halved_noise_scale_is_caught(
    neighbouring: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    eps, runs = 1.0, 6000
    d0 = _labels(6, 6)
    d1 = (
        _labels(7, 5) if neighbouring == "replace_one" else _labels(7, 6)
    )  # one label flipped / one row added
    honest = audit_outputs(_outputs(d0, neighbouring, eps, runs), _outputs(d1, neighbouring, eps, runs))
    assert not honest.refutes(eps)

    real = class_prior_module.laplace_noise

    def halved(scale: float, *args: object, **kwargs: object) -> object:  # planted: noise for 2ε
        return real(scale / 2, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(class_prior_module, "laplace_noise", halved)
    broken = audit_outputs(_outputs(d0, neighbouring, eps, runs), _outputs(d1, neighbouring, eps, runs))
    assert broken.refutes(eps)


def _data(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 4))
    X /= np.maximum(1.0, np.linalg.norm(X, axis=1))[:, None]
    y = (X[:, 0] + 0.3 > 0).astype(int)  # about 60 % positives
    return X, y


def test_estimator_uses_the_class_prior_only_for_pure_epsilon_below_the_threshold() -> None:
    X, y = _data(400)
    small = AUTO_CLASS_PRIOR_EPSILON_N / 400 / 2  # ε·n = 50
    est = DPLogisticRegression(epsilon=small, delta=0.0, feature_norm=1.0, rng=0).fit(X, y)
    assert est.solver_ == "class_prior"
    majority = int(np.mean(y) > 0.5)
    assert np.all(est.predict(X) == majority) and np.all(est.coef_ == 0.0)
    assert est.privacy_spent_.epsilon == pytest.approx(small)
    # above the threshold, δ > 0, no intercept column: the previous defaults
    assert DPLogisticRegression(epsilon=1.0, delta=0.0, feature_norm=1.0, rng=0).fit(X, y).solver_ == (
        "objective_perturbation"
    )
    assert DPLogisticRegression(epsilon=small, feature_norm=1.0, rng=0).fit(X, y).solver_ == "dp_sgd"
    no_intercept = DPLogisticRegression(
        epsilon=small, delta=0.0, feature_norm=1.0, fit_intercept=False, rng=0
    )
    assert no_intercept.fit(X, y).solver_ == "objective_perturbation"


def test_estimator_class_prior_under_add_remove_reads_only_the_declared_size() -> None:
    X, y = _data(400)
    est = DPLogisticRegression(
        epsilon=0.1, delta=0.0, feature_norm=1.0, rng=0, neighbouring="add_remove", declared_size=500
    ).fit(X, y)
    assert est.solver_ == "class_prior" and est.privacy_spent_.neighbouring == "add_remove"
    big = DPLogisticRegression(
        epsilon=0.1, delta=0.0, feature_norm=1.0, rng=0, neighbouring="add_remove", declared_size=5000
    )
    assert big.fit(X, y).solver_ != "class_prior"  # the rule reads N, not the 400 rows


def test_explicit_class_prior_needs_an_intercept_and_checks_the_bounds() -> None:
    X, y = _data(100)
    with pytest.raises(InvalidParameterError, match="fit_intercept=True"):
        DPLogisticRegression(solver="class_prior", feature_norm=1.0, fit_intercept=False, rng=0).fit(X, y)
    with pytest.raises(BoundsViolationError, match="declared feature_norm"):
        DPLogisticRegression(solver="class_prior", feature_norm=0.01, rng=0).fit(X, y)
    ok = DPLogisticRegression(solver="class_prior", epsilon=2.0, feature_norm=1.0, rng=0).fit(X, y)
    assert ok.solver_ == "class_prior" and ok.privacy_spent_.epsilon == pytest.approx(2.0, rel=1e-4)
