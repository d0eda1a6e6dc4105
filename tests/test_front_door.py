"""The package surface, declared method specs enforced by ``minimize``, and ``accountant=`` everywhere."""

from __future__ import annotations

import subprocess
import sys
import warnings

import numpy as np
import pytest

import dpopt
from dpopt import Budget, InvalidParameterError, make_accountant, minimize
from dpopt.exceptions import BudgetExceededError
from dpopt.problems import DataBounds, ERMProblem, L1Ball, L2Ball, LogisticLoss
from dpopt.solvers import available_methods
from dpopt.solvers.minimize import describe_methods, method_spec


def _logistic(n: int = 200, d: int = 5, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    X /= np.maximum(1.0, np.linalg.norm(X, axis=1))[:, None]
    y = np.where(X @ np.arange(1, d + 1) > 0, 1.0, -1.0)
    return X, y


def test_top_level_surface_is_lazy_and_complete() -> None:
    code = (
        "import sys, dpopt; heavy = [m for m in ('scipy', 'dp_accounting', 'sklearn') if m in sys.modules]; "
        "print(heavy)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    assert out.strip() == "[]", "import dpopt must not import the heavy dependencies"
    for name in (
        "minimize",
        "Budget",
        "answer",
        "optimize_strategy",
        "PrivateADMM",
        "hamsi",
        "make_accountant",
        "DPLogisticRegression",
        "DPLinearRegression",
        "DPLasso",
        "DPOptError",
        "BudgetExceededError",
    ):
        assert getattr(dpopt, name) is not None
    with pytest.raises(AttributeError):
        dpopt.no_such_name  # noqa: B018


def test_help_lists_every_method() -> None:
    doc = dpopt.minimize.__doc__ or ""
    for name in available_methods():
        assert name in doc
        assert name in describe_methods()


def test_unknown_option_gets_did_you_mean() -> None:
    X, y = _logistic()
    P = ERMProblem(LogisticLoss(), DataBounds(1.0), L2Ball(5))
    with pytest.raises(InvalidParameterError, match=r"did you mean 'batch_size'.*valid options"):
        minimize(P, X, y, method="dp_gd", budget=Budget(1.0, 1e-5), rng=0, bach_size=10)
    with pytest.raises(InvalidParameterError, match=r"did you mean 'mirror_descent'"):
        minimize(P, X, y, method="mirror_decent", budget=Budget(1.0, 1e-5), rng=0)


def test_option_types_and_ranges_are_checked_before_running() -> None:
    X, y = _logistic()
    P = ERMProblem(LogisticLoss(), DataBounds(1.0), L2Ball(5))
    with pytest.raises(InvalidParameterError, match=r"batch_size.*out of range"):
        minimize(P, X, y, method="dp_sgd", budget=Budget(1.0, 1e-5), rng=0, batch_size=0)
    with pytest.raises(InvalidParameterError, match=r"grad_scale.*one of"):
        minimize(P, X, y, method="dp_gd", budget=Budget(1.0, 1e-5), rng=0, grad_scale="median")
    with pytest.raises(InvalidParameterError, match="max_iter: expected a positive int"):
        minimize(P, X, y, method="dp_gd", budget=Budget(1.0, 1e-5), rng=0, max_iter=2.5)
    with pytest.raises(InvalidParameterError, match=r"calibration.*accepts"):
        minimize(P, X, y, method="output_perturbation", budget=Budget(1.0, 1e-5), rng=0, calibration="paper")


def test_unsupported_problem_names_the_methods_that_support_it() -> None:
    X, y = _logistic()
    unconstrained = ERMProblem(LogisticLoss(), DataBounds(1.0))
    with pytest.raises(
        InvalidParameterError, match=r"needs a bounded constraint set.*objective_perturbation"
    ):
        minimize(unconstrained, X, y, method="mirror_descent", budget=Budget(1.0, 1e-5), rng=0)
    no_ridge = ERMProblem(LogisticLoss(), DataBounds(1.0), L2Ball(5))
    # momentum methods run without a ridge (public surrogate ridge); output perturbation needs one
    res = minimize(no_ridge, X, y, method="dp_nesterov", budget=Budget(1.0, 1e-5), rng=0, max_iter=5)
    assert res.parameters["surrogate_ridge"] > 0
    with pytest.raises(InvalidParameterError, match="does not support the LogisticLoss"):
        minimize(no_ridge, X, y, method="ssp", budget=Budget(1.0, 1e-5), rng=0)
    with pytest.raises(InvalidParameterError, match="l2_penalty"):
        minimize(no_ridge, X, y, method="output_perturbation", budget=Budget(1.0, 1e-5), rng=0)


def test_every_spec_is_consistent_with_its_solver() -> None:
    declared: set[str] = set()
    real: set[str] = set()
    for name in available_methods():
        spec = method_spec(name)
        opts = spec.options()  # imports the solver and reads its signature
        if spec.iteration_option is not None:
            assert spec.iteration_option in opts, name
        for key in set(spec.ranges) & set(opts):  # the range is enforced on the option
            assert opts[key].low is not None or opts[key].high is not None, (name, key)
        declared |= set(spec.ranges)
        real |= set(opts)
        assert spec.calibrations and spec.neighbouring and spec.summary
    assert declared <= real, f"ranges declared for options no method has: {sorted(declared - real)}"


def test_max_iter_maps_to_the_method_option_and_old_names_warn() -> None:
    X, y = _logistic()
    P = ERMProblem(LogisticLoss(), DataBounds(1.0), L2Ball(5))
    r = minimize(P, X, y, method="dp_gd", budget=Budget(1.0, 1e-5), rng=0, max_iter=7)
    assert r.nit == r.iterations == 7
    with pytest.warns(DeprecationWarning, match="max_iter"):
        r2 = minimize(P, X, y, method="dp_gd", budget=Budget(1.0, 1e-5), rng=0, iterations=7)
    np.testing.assert_array_equal(r.solution, r2.solution)
    with pytest.raises(InvalidParameterError, match="not both"), warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        minimize(P, X, y, method="dp_gd", budget=Budget(1.0, 1e-5), rng=0, iterations=7, max_iter=7)


def test_minimize_composes_into_the_callers_accountant_and_refuses_over_budget() -> None:
    X, y = _logistic()
    P = ERMProblem(LogisticLoss(), DataBounds(1.0), L1Ball(5))
    acct = make_accountant("pld", budget=Budget(1.2, 1e-5), neighbouring="replace_one")
    minimize(P, X, y, method="frank_wolfe", budget=Budget(1.0, 1e-6), rng=0, accountant=acct)
    assert acct.n_events >= 1 and 0 < acct.epsilon() <= 1.2
    before = acct.n_events
    with pytest.raises(BudgetExceededError):
        minimize(P, X, y, method="frank_wolfe", budget=Budget(1.0, 1e-6), rng=0, accountant=acct)
    assert acct.n_events == before  # refused: nothing recorded, nothing drawn
    wrong = make_accountant("pld", neighbouring="add_remove")
    with pytest.raises(InvalidParameterError, match="replace_one"):
        minimize(P, X, y, method="frank_wolfe", budget=Budget(1.0, 1e-6), rng=0, accountant=wrong)


def test_estimators_share_one_accountant_across_clones() -> None:
    from sklearn.base import clone
    from sklearn.model_selection import cross_val_score

    X, y = _logistic(400)
    acct = make_accountant("pld", budget=Budget(3.0, 1e-3), neighbouring="replace_one")
    est = dpopt.DPLogisticRegression(epsilon=1.0, delta=1e-5, feature_norm=1.0, rng=0, accountant=acct)
    assert clone(est).accountant is acct
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cross_val_score(est, X, y, cv=2)
    assert len(acct.ledger) == 2  # both folds' fits are in the one ledger
    with pytest.raises(BudgetExceededError):
        for _ in range(40):  # PLD composition of the DP-SGD fits is tight: it takes a few more than 3
            clone(est).fit(X, y)
    assert acct.epsilon() <= 3.0 * (1 + 1e-9)


def test_private_admm_composes_into_the_callers_accountant() -> None:
    from dpopt.datasets import make_logistic
    from dpopt.distributed.admm import PrivateADMM, geometric
    from dpopt.distributed.topology import ring, split_rows

    ds = make_logistic(300, 4, rng=0)
    parts = split_rows(300, 3, rng=0)
    data = [(ds.X[p], ds.y[p]) for p in parts]
    admm = PrivateADMM(
        ring(3),
        method="pp",
        penalty=geometric(0.5, 1.1),
        theta=0.5,
        budget=Budget(1.0),
        noise_ratio=1.05,
        max_iter=5,
    )
    acct = make_accountant("basic", budget=Budget(1.5), neighbouring="replace_one")
    res = admm.run(data, rng=0, accountant=acct)
    assert len(acct.ledger) == 1 and acct.epsilon() == pytest.approx(res.privacy.epsilon, rel=1e-6)
    with pytest.raises(BudgetExceededError):
        admm.run(data, rng=0, accountant=acct)
    assert len(acct.ledger) == 1
    stopped = admm.run(data, rng=0, callback=lambda info: info.round >= 2)
    assert stopped.status == "stopped" and stopped.rounds == 2


@pytest.mark.parametrize("method", ["mirror_descent", "frank_wolfe"])
def test_erm_callbacks_follow_the_one_protocol(method: str) -> None:
    X, y = _logistic()
    P = ERMProblem(LogisticLoss(), DataBounds(1.0), L1Ball(5))
    seen: list[int] = []

    def cb(info):
        seen.append(info.nit)
        assert info.x is not None and not info.x.flags.writeable
        if info.nit >= 4:
            raise StopIteration

    r = minimize(P, X, y, method=method, budget=Budget(1.0, 1e-5), rng=0, max_iter=20, callback=cb)
    assert r.status == "stopped" and not r.success and r.nit == 4
    assert P.constraint is not None and P.constraint.contains(r.solution, tol=1e-9)
    full = minimize(
        P, X, y, method=method, budget=Budget(1.0, 1e-5), rng=0, max_iter=20, callback=lambda info: False
    )
    assert full.status == "completed"


def test_secure_rng_is_hardened_or_refused_for_the_perturbation_methods() -> None:
    X, y = _logistic()
    P = ERMProblem(LogisticLoss(), DataBounds(1.0), L2Ball(5), l2_penalty=0.1)
    acct = make_accountant("pld", budget=Budget(2.0, 1e-4), neighbouring="replace_one")
    with pytest.raises(InvalidParameterError, match="secure"):
        minimize(
            P, X, y, method="objective_perturbation", budget=Budget(1.0, 1e-5), rng="secure", accountant=acct
        )
    assert acct.n_events == 0  # refused before anything was spent
    r = minimize(
        P, X, y, method="output_perturbation", budget=Budget(1.0, 1e-5), rng="secure", accountant=acct
    )
    assert r.status == "converged" and acct.n_events == 1 and P.constraint is not None
    assert P.constraint.contains(r.solution)
