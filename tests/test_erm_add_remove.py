"""``minimize(..., neighbouring="add_remove")`` (issue 13): DP-SGD from declared quantities only."""

from __future__ import annotations

import numpy as np
import pytest

from dpopt.accounting import Budget, make_accountant
from dpopt.exceptions import InvalidParameterError
from dpopt.problems import DataBounds, ERMProblem
from dpopt.solvers import minimize

PROB = ERMProblem("logistic", DataBounds(1.0), None)


def _task(seed: int, n: int = 400, d: int = 5) -> tuple[np.ndarray, ...]:
    r = np.random.default_rng(seed)
    X = r.normal(size=(2 * n, d))
    X /= np.maximum(1.0, np.linalg.norm(X, axis=1))[:, None]
    y = np.where(X @ np.linspace(1.0, -0.5, d) + 0.2 * r.normal(size=2 * n) > 0, 1.0, -1.0)
    return X[:n], y[:n], X[n:], y[n:]


def _fit(X: np.ndarray, y: np.ndarray, eps: float, seed: int, **kw: object):  # type: ignore[no-untyped-def]
    return minimize(PROB, X, y, budget=Budget(eps, 1e-5), rng=seed, neighbouring="add_remove", **kw)


def test_auto_is_add_remove_dp_sgd_with_size_free_calibration() -> None:
    X, y, _, _ = _task(0)
    a = _fit(X, y, 1.0, 0, declared_size=400)
    b = _fit(X[:-1], y[:-1], 1.0, 0, declared_size=400)  # an add/remove neighbour: one record fewer
    assert a.method == "dp_sgd" and a.privacy.neighbouring == "add_remove"
    assert a.privacy.epsilon <= 1.0 + 1e-9
    assert a.parameters["n_samples"] is None
    # everything the release's distribution is calibrated with is the same for both neighbours
    # (a planted use of the data's n would change the rate, the steps or σ)
    assert a.nit == b.nit == round(20 * 400 / 20)
    # the add/remove default averages the last half of the iterates when the noise dominates
    from dpopt.solvers.gradient import SUFFIX_AVERAGE_MULTIPLIER

    noisy = a.parameters["noise_multiplier"] >= SUFFIX_AVERAGE_MULTIPLIER
    assert a.parameters["average"] == ("suffix" if noisy else "none")
    for key in ("sampling_rate", "noise_scales", "batch_size", "step_first", "iterations"):
        assert a.parameters[key] == b.parameters[key], key


def test_add_remove_default_learns_and_improves_with_epsilon() -> None:
    seeds = range(3)
    acc = {}
    for eps in (0.25, 1.0, 4.0):
        vals = []
        for s in seeds:
            X, y, Xte, yte = _task(s)
            theta = _fit(X, y, eps, s, declared_size=400).solution
            vals.append(np.mean(np.where(Xte @ theta > 0, 1.0, -1.0) == yte))
        acc[eps] = float(np.mean(vals))
    majority = max(np.mean(_task(s)[3] > 0) for s in seeds)
    assert acc[1.0] > majority + 0.1, (acc, majority)
    assert acc[0.25] <= acc[1.0] + 0.02 and acc[1.0] <= acc[4.0] + 0.02, acc


def test_add_remove_refusals_are_clear() -> None:
    X, y, _, _ = _task(1, n=100)
    with pytest.raises(InvalidParameterError, match="declared_size"):
        _fit(X, y, 1.0, 0)  # the data's size is private: no silent use of it
    with pytest.raises(InvalidParameterError, match="replace_one' only"):
        _fit(X, y, 1.0, 0, method="objective_perturbation", declared_size=100)
    with pytest.raises(InvalidParameterError, match="only used with neighbouring='add_remove'"):
        minimize(PROB, X, y, budget=Budget(1.0, 1e-5), rng=0, declared_size=100)
    with pytest.raises(InvalidParameterError, match="differs from the accountant"):
        _fit(X, y, 1.0, 0, declared_size=100, accountant=make_accountant("pld", neighbouring="replace_one"))
    with pytest.raises(InvalidParameterError, match="neighbouring"):
        minimize(PROB, X, y, budget=Budget(1.0, 1e-5), rng=0, neighbouring="swap")


def test_add_remove_accountant_selects_the_relation_and_explicit_rate_is_kept() -> None:
    X, y, _, _ = _task(2, n=200)
    acc = make_accountant("pld", neighbouring="add_remove")
    res = minimize(PROB, X, y, budget=Budget(1.0, 1e-5), rng=0, accountant=acc, sampling_rate=0.1, batch_size=20,
                   max_iter=50)  # fmt: skip
    assert res.method == "dp_sgd" and res.privacy.neighbouring == "add_remove" and res.nit == 50


def test_logistic_estimator_under_add_remove() -> None:
    from sklearn.base import clone

    from dpopt.estimators import DPLogisticRegression
    from dpopt.exceptions import DPOptError

    X, y, Xte, yte = _task(3)
    est = DPLogisticRegression(
        epsilon=2.0, feature_norm=1.0, rng=0, neighbouring="add_remove", declared_size=400
    )
    est.fit(X, y)
    assert est.solver_ == "dp_sgd" and est.privacy_spent_.neighbouring == "add_remove"
    assert est.score(Xte, yte) > 0.75
    assert clone(est).get_params()["declared_size"] == 400
    with pytest.raises(DPOptError, match="declared_size"):
        DPLogisticRegression(epsilon=1.0, feature_norm=1.0, rng=0, neighbouring="add_remove").fit(X, y)


def test_suffix_average_is_the_mean_of_the_last_half_and_auto_follows_the_noise_multiplier() -> None:
    from dpopt.solvers.gradient import SUFFIX_AVERAGE_MULTIPLIER, dp_gd

    X, y, _, _ = _task(1)
    path: list[np.ndarray] = []
    kw = {"budget": Budget(1.0, 1e-5), "iterations": 9, "step": 0.5}  # full batch: a cheap calibration
    res = dp_gd(PROB, X, y, rng=3, average="suffix", callback=lambda info: path.append(info.x.copy()), **kw)
    assert res.parameters["average"] == "suffix" and res.parameters["averaged_iterates"] == 4
    assert np.allclose(res.solution, np.mean(path[5:], axis=0))
    last = dp_gd(PROB, X, y, rng=3, **kw)  # the default: the last iterate, the same noise draws
    assert np.array_equal(last.solution, path[-1]) and last.parameters["average"] == "none"
    # "auto": suffix averaging exactly when the (public) per-step noise multiplier is large
    for eps in (0.02, 5.0):
        r = dp_gd(PROB, X, y, rng=3, **{**kw, "budget": Budget(eps, 1e-5)}, average="auto")
        noisy = r.parameters["noise_multiplier"] >= SUFFIX_AVERAGE_MULTIPLIER
        assert r.parameters["average"] == ("suffix" if noisy else "none"), eps
        assert noisy == (eps == 0.02)
