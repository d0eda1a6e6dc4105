"""The Gaussian matrix mechanism front door ``answer``."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpopt.accounting import Budget, make_accountant
from dpopt.exceptions import BudgetExceededError, InvalidParameterError, PrivacyClaimWarning
from dpopt.linear_queries import optimize_strategy
from dpopt.linear_queries import workloads as wl
from dpopt.linear_queries.mechanism import Answers, answer, expected_error, strategy_sensitivity


@pytest.fixture(scope="module")
def prefix_setup():
    W = wl.prefix(16)
    return W, optimize_strategy(W), np.arange(16) * 3


def test_empirical_error_matches_expected(prefix_setup):
    W, strat, x = prefix_setup
    budget = Budget(1.0, 1e-5)
    truth = W.answer(x)
    errors = []
    for seed in range(400):
        out = answer(W, x, budget=budget, rng=seed, strategy=strat, accountant=make_accountant("rdp"))
        errors.append(np.sum((out.values - truth) ** 2))
    assert np.mean(errors) == pytest.approx(out.expected_error, rel=0.12)
    assert out.expected_error == pytest.approx(expected_error(strat, budget))
    assert out.expected_error_per_query == pytest.approx(out.expected_error / 16)
    # data independence: a different histogram has the same error distribution
    other = np.zeros(16)
    errs2 = [
        np.sum(
            (
                answer(
                    W, other, budget=budget, rng=10_000 + s, strategy=strat, accountant=make_accountant("rdp")
                ).values
            )
            ** 2
        )
        for s in range(200)
    ]
    assert np.mean(errs2) == pytest.approx(out.expected_error, rel=0.15)


def test_privacy_and_calibration(prefix_setup):
    W, strat, x = prefix_setup
    out = answer(W, x, budget=Budget(0.1, 1e-4), rng=0, strategy=strat)
    assert isinstance(out, Answers)
    assert out.privacy.epsilon <= 0.1 * (1 + 1e-6)
    assert out.privacy.neighbouring == "add_remove"
    assert out.sensitivity == pytest.approx(1.0)
    paper = answer(W, x, budget=Budget(0.1, 1e-4), rng=0, strategy=strat, calibration="paper")
    assert paper.sigma == pytest.approx(math.sqrt(2 * math.log(2 / 1e-4)) / 0.1)
    assert paper.sigma > out.sigma  # the analytic calibration needs less noise
    assert paper.privacy.sound
    with pytest.warns(PrivacyClaimWarning):
        unsound = answer(W, x, budget=Budget(20.0, 1e-4), rng=0, strategy=strat, calibration="paper")
    assert not unsound.privacy.sound
    assert unsound.privacy.true_epsilon > 20


def test_replace_one_sensitivity():
    assert strategy_sensitivity(np.eye(4), "replace_one") == pytest.approx(math.sqrt(2))
    A = np.random.default_rng(0).normal(size=(5, 6))
    A /= np.linalg.norm(A, axis=0).max()
    assert strategy_sensitivity(A, "replace_one") <= 2 * strategy_sensitivity(A) + 1e-12
    W = wl.identity(4)
    out = answer(
        W, np.ones(4), budget=Budget(1.0, 1e-5), rng=1, strategy="identity", neighbouring="replace_one"
    )
    assert out.sensitivity == pytest.approx(math.sqrt(2))
    assert out.privacy.neighbouring == "replace_one"
    with pytest.raises(InvalidParameterError, match="neighbouring"):
        answer(
            W,
            np.ones(4),
            budget=Budget(1.0, 1e-5),
            rng=1,
            strategy="identity",
            neighbouring="replace_one",
            accountant=make_accountant("pld"),
        )


def test_budget_refusal_leaves_ledger_unchanged(prefix_setup):
    W, strat, x = prefix_setup
    acct = make_accountant("pld", budget=Budget(1.0, 1e-5))
    answer(W, x, budget=Budget(0.8, 1e-5), rng=0, strategy=strat, accountant=acct)
    with pytest.raises(BudgetExceededError):
        answer(W, x, budget=Budget(0.8, 1e-5), rng=0, strategy=strat, accountant=acct)
    assert len(acct.ledger) == 1


def test_baseline_strategies_and_default(prefix_setup):
    W, _, x = prefix_setup
    budget = Budget(1.0, 1e-5)
    errs = {
        s: answer(W, x, budget=budget, rng=0, strategy=s).expected_error
        for s in ("identity", "hierarchical", "wavelet")
    }
    opt = answer(W, x, budget=budget, rng=0)
    assert opt.strategy_method == "dual"
    assert all(opt.expected_error <= e for e in errs.values())
    small = wl.prefix(4)
    dense = answer(small, np.ones(4), budget=budget, rng=0, strategy=np.eye(4))
    assert dense.expected_error == pytest.approx(dense.sigma**2 * small.frobenius_norm_sq)


def test_bad_histograms(prefix_setup):
    W, strat, _ = prefix_setup
    b = Budget(1.0, 1e-5)
    with pytest.raises(InvalidParameterError, match="non-negative integer"):
        answer(W, -np.ones(16), budget=b, rng=0, strategy=strat)
    with pytest.raises(InvalidParameterError, match="non-negative integer"):
        answer(W, np.full(16, 0.5), budget=b, rng=0, strategy=strat)
    with pytest.raises(InvalidParameterError, match="length"):
        answer(W, np.ones(15), budget=b, rng=0, strategy=strat)
    with pytest.raises(InvalidParameterError, match="NaN"):
        answer(W, np.full(16, np.nan), budget=b, rng=0, strategy=strat, counts="real")
    out = answer(W, np.full(16, -0.5), budget=b, rng=0, strategy=strat, counts="real")
    assert out.values.shape == (16,)
    with pytest.raises(InvalidParameterError, match="δ > 0"):
        answer(W, np.ones(16), budget=Budget(1.0), rng=0, strategy=strat)
    with pytest.raises(InvalidParameterError):
        answer(W, np.ones(16), budget=b, rng=0, strategy=np.eye(15))


def test_same_seed_same_answers(prefix_setup):
    W, strat, x = prefix_setup
    a = answer(W, x, budget=Budget(1.0, 1e-5), rng=3, strategy=strat)
    b = answer(W, x, budget=Budget(1.0, 1e-5), rng=3, strategy=strat)
    np.testing.assert_array_equal(a.values, b.values)


def test_product_workload_answers():
    K = wl.kronecker(wl.prefix(6), wl.all_range(5))
    res = optimize_strategy(K)
    x = np.arange(30)
    truth = K.answer(x)
    errs = []
    for seed in range(200):
        out = answer(
            K, x, budget=Budget(1.0, 1e-5), rng=seed, strategy=res, accountant=make_accountant("rdp")
        )
        errs.append(np.sum((out.values - truth) ** 2))
    assert np.mean(errs) == pytest.approx(out.expected_error, rel=0.2)
    # the dense path gives the same expected error
    dense = answer(K, x, budget=Budget(1.0, 1e-5), rng=0, strategy=res.strategy)
    assert dense.expected_error == pytest.approx(out.expected_error, rel=1e-8)
    big = wl.kronecker(wl.prefix(128), wl.prefix(64))
    out = answer(big, np.ones(128 * 64), budget=Budget(1.0, 1e-5), rng=0)
    assert out.values.shape == (128 * 64,) and out.sensitivity == pytest.approx(1.0)


def test_query_variances_sum_to_expected_error(prefix_setup):
    from dpopt.linear_queries import query_variances

    W, strat, _ = prefix_setup
    budget = Budget(1.0, 1e-5)
    v = query_variances(W, strat, budget)
    assert v.shape == (16,) and np.all(v > 0)
    assert v.sum() == pytest.approx(expected_error(strat, budget), rel=1e-8)
    K = wl.kronecker(wl.prefix(4), wl.all_range(3))
    res = optimize_strategy(K)
    assert query_variances(K, res, budget).sum() == pytest.approx(expected_error(res, budget), rel=1e-8)


def test_secure_rng_path(prefix_setup):
    W, strat, x = prefix_setup
    out = answer(W, x, budget=Budget(1.0, 1e-5), rng="secure", strategy=strat)
    assert out.values.shape == (16,) and np.all(np.isfinite(out.values))


def test_marginal_workload_answers():
    M = wl.marginals((4, 3, 5), 2)
    res = optimize_strategy(M)
    x = np.random.default_rng(0).integers(0, 5, 60)
    truth = M.answer(x)
    errs = [
        np.sum(
            (
                answer(
                    M, x, budget=Budget(1.0, 1e-5), rng=s, strategy=res, accountant=make_accountant("rdp")
                ).values
                - truth
            )
            ** 2
        )
        for s in range(200)
    ]
    out = answer(M, x, budget=Budget(1.0, 1e-5), rng=0, strategy=res)
    assert np.mean(errs) == pytest.approx(out.expected_error, rel=0.15)
    from dpopt.linear_queries.union import plan_from_result

    A = plan_from_result(res).dense_matrix()
    dense = answer(M, x, budget=Budget(1.0, 1e-5), rng=0, strategy=A)  # same strategy, dense path
    assert dense.expected_error == pytest.approx(out.expected_error, rel=1e-8)
    big = wl.marginals((16, 16, 16, 16), 2)
    out = answer(big, np.ones(16**4), budget=Budget(1.0, 1e-5), rng=0)
    assert out.values.shape == (6 * 256,) and out.sensitivity == pytest.approx(1.0)
