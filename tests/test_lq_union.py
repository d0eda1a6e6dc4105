"""Unions of Kronecker products: structured strategies checked against the dense solver (issue 16 d)."""

from __future__ import annotations

import numpy as np
import pytest

from dpopt.accounting import Budget, make_accountant
from dpopt.exceptions import InvalidParameterError
from dpopt.linear_queries import answer, optimize_strategy, query_variances
from dpopt.linear_queries import workloads as wl
from dpopt.linear_queries.strategy import StrategyResult, svd_lower_bound
from dpopt.linear_queries.union import (
    is_union_of_products,
    optimize_union,
    plan_from_result,
    product_marginals,
    union_lower_bound,
)

CASES = [
    ((4, 5, 6), {}),
    ((8, 3, 4), {0: "all_range"}),
    ((12, 3, 5), {0: "prefix"}),
    ((6, 5, 4), {0: "prefix", 1: "all_range"}),
]


@pytest.mark.parametrize(("shape", "queries"), CASES)
def test_block_method_matches_the_dense_optimum(shape, queries) -> None:
    W = product_marginals(shape, 2, queries=queries)
    assert is_union_of_products(W)
    res = optimize_union(W)
    dense = optimize_strategy(W)  # n <= 4096: the dense certified solver
    assert res.converged and res.gap <= 1e-4
    # both are within their certified gaps of the same optimum
    assert res.objective == pytest.approx(dense.objective, rel=2e-4)
    assert res.lower_bound <= dense.objective * (1 + 1e-9)
    assert res.lower_bound >= dense.lower_bound * (1 - 2e-4)
    # the plan's own sensitivity is 1 and its error formula matches the dense evaluation
    plan = plan_from_result(res)
    assert plan.unit_sensitivity() == pytest.approx(1.0, rel=1e-9)


def test_dense_strategy_of_the_plan_has_the_reported_error() -> None:
    """Form the plan's strategy densely on a tiny domain and evaluate it independently."""
    from dpopt.linear_queries.strategy import strategy_error

    shape, queries = (5, 3, 4), {0: "all_range"}
    W = product_marginals(shape, 2, queries=queries)
    res = optimize_union(W)
    A_full = plan_from_result(res).dense_matrix()
    assert np.max(np.sum(A_full**2, axis=0)) == pytest.approx(1.0, rel=1e-9)
    err, bias = strategy_error(A_full, W.gram())
    assert bias < 1e-9
    assert err == pytest.approx(res.objective, rel=1e-8)


def test_marginals_closed_form_plan_and_lower_bound() -> None:
    W = product_marginals((3, 4, 5), 2)
    M = wl.marginals((3, 4, 5), 2)
    res = optimize_union(W)
    closed = optimize_strategy(M)
    assert res.objective == pytest.approx(closed.objective, rel=1e-10)
    assert union_lower_bound(W) == pytest.approx(svd_lower_bound(W.gram()), rel=1e-9)
    assert plan_from_result(closed).unit_sensitivity() == pytest.approx(1.0)


def test_separable_fallback_and_reported_bound() -> None:
    W = product_marginals((8, 3, 4), 2, queries={0: "all_range"})
    res = optimize_union(W, max_special_cells=4)  # forces the separable family
    dense = optimize_strategy(W)
    assert res.params["family"].startswith("separable")
    assert dense.objective <= res.objective <= 1.1 * dense.objective
    assert 0 < res.lower_bound <= svd_lower_bound(W.gram()) * (1 + 1e-9)


def test_large_domain_is_structured_and_answers_match_dense_on_small() -> None:
    shape = (60, 2, 7, 10, 5, 20, 4, 50, 3, 16)  # 8.1e9 cells
    W = product_marginals(shape, 2, queries={0: "all_range"})
    res = optimize_strategy(W)  # dispatches to the union path
    assert res.method == "union" and res.converged and res.gap <= 1e-4
    assert res.strategy.shape == (0, W.domain_size)
    with pytest.raises(InvalidParameterError, match="too many"):
        W.gram()


def test_union_answers_are_unbiased_and_match_expected_error(tmp_path) -> None:
    shape, queries = (6, 2, 3), {0: "all_range"}
    W = product_marginals(shape, 2, queries=queries)
    res = optimize_union(W)
    x = np.random.default_rng(1).integers(0, 20, size=W.domain_size)
    truth = W.answer(x)
    b = Budget(1.0, 1e-6)
    errs = [
        np.sum(
            (answer(W, x, budget=b, rng=s, strategy=res, accountant=make_accountant("rdp")).values - truth)
            ** 2
        )
        for s in range(200)
    ]
    out = answer(W, x, budget=b, rng=0, strategy=res)
    assert np.mean(errs) == pytest.approx(out.expected_error, rel=0.12)
    assert query_variances(W, res, b).sum() == pytest.approx(out.expected_error, rel=1e-9)
    # with σ -> tiny budget noise the answers are exact
    loose = answer(W, x, budget=Budget(1e6, 0.5), rng=0, strategy=res)
    np.testing.assert_allclose(loose.values, truth, atol=1e-2)
    # x̂ lies in the strategy's row space: it reproduces every 2-way marginal of x (not x itself)
    np.testing.assert_allclose(W.answer(loose.histogram_estimate), truth, atol=1e-2)
    # saved and loaded: the same plan
    back = StrategyResult.load(res.save(tmp_path / "s.npz"), workload=W)
    again = answer(W, x, budget=b, rng=0, strategy=back)
    np.testing.assert_allclose(again.values, out.values)
