"""Non-negative, consistent post-processing (issue 16 c)."""

from __future__ import annotations

import numpy as np
import pytest

from dpopt.accounting import Budget, make_accountant
from dpopt.linear_queries import answer, optimize_strategy
from dpopt.linear_queries import workloads as wl
from dpopt.linear_queries.consistency import nonnegative_histogram, nonnegative_tables
from dpopt.linear_queries.union import optimize_union, product_marginals


def _sparse_counts(n: int, seed: int = 0) -> np.ndarray:
    g = np.random.default_rng(seed)
    x = np.zeros(n)
    x[g.choice(n, size=max(1, n // 10), replace=False)] = g.integers(1, 30, size=max(1, n // 10))
    return x


def test_tables_are_nonnegative_and_consistent() -> None:
    g = np.random.default_rng(0)
    dims = (4, 3, 5)
    tables = {S: g.normal(size=tuple(dims[i] for i in S)) for S in [(0, 1), (0, 2), (1, 2)]}
    out, info = nonnegative_tables(tables, dims)
    assert info["converged"]
    assert all(np.all(t >= 0) for t in out.values())
    assert info["max_inconsistency"] < 1e-6
    np.testing.assert_allclose(out[(0, 1)].sum(axis=1), out[(0, 2)].sum(axis=1), atol=1e-6)
    np.testing.assert_allclose(out[(0, 1)].sum(axis=0), out[(1, 2)].sum(axis=1), atol=1e-6)
    np.testing.assert_allclose(out[(0, 1)].sum(), out[(1, 2)].sum(), atol=1e-6)
    # already non-negative and consistent tables are left alone
    x = g.integers(0, 9, size=dims).astype(float)
    truth = {(0, 1): x.sum(2), (0, 2): x.sum(1), (1, 2): x.sum(0)}
    same, _ = nonnegative_tables(truth, dims)
    for S in truth:
        np.testing.assert_allclose(same[S], truth[S], atol=1e-9)


def test_marginal_release_projection_never_increases_error() -> None:
    """The tables are projected onto a convex set containing the truth: never farther, per draw."""
    shape = (8, 3, 4)
    W = product_marginals(shape, 2)  # the workload's answers are the tables' cells
    res = optimize_union(W)
    x = _sparse_counts(W.domain_size)
    truth = W.answer(x)
    b = Budget(0.5, 1e-6)
    e_ls, e_nn = [], []
    for s in range(10):
        ls = answer(W, x, budget=b, rng=s, strategy=res, accountant=make_accountant("rdp"))
        nn = answer(W, x, budget=b, rng=s, strategy=res, accountant=make_accountant("rdp"), nonnegative=True)
        assert nn.postprocessing == "nonnegative" and np.all(nn.values >= 0)
        assert nn.privacy == ls.privacy  # post-processing: the same release, the same cost
        e_ls.append(np.sum((ls.values - truth) ** 2))
        e_nn.append(np.sum((nn.values - truth) ** 2))
        assert e_nn[-1] <= e_ls[-1] * (1 + 1e-6)
    assert np.mean(e_nn) < 0.8 * np.mean(e_ls)
    # ranges built on the projected tables are consistent with them (prefix sums of the same cells)
    P = product_marginals(shape, 2, queries={0: "prefix"})
    out = answer(P, x, budget=b, rng=0, strategy=optimize_union(P), nonnegative=True)
    assert np.all(out.values >= 0)


def test_dense_and_identity_paths() -> None:
    W = wl.prefix(32)
    x = _sparse_counts(32, seed=2)
    b = Budget(0.5, 1e-6)
    for strategy in (optimize_strategy(W), "identity"):
        out = answer(W, x, budget=b, rng=0, strategy=strategy, nonnegative=True)
        assert np.all(out.histogram_estimate >= 0)
        np.testing.assert_allclose(out.values, np.cumsum(out.histogram_estimate))
    # the projection in the strategy's metric: KKT conditions of min (x - x̂)ᵀG(x - x̂), x >= 0
    g = np.random.default_rng(1)
    A = g.normal(size=(12, 8))
    G = A.T @ A
    xh = g.normal(size=8)
    xp = nonnegative_histogram(xh, G)
    grad = G @ (xp - xh)
    assert np.all(xp >= 0)
    assert np.all(grad[xp <= 1e-8] >= -1e-5) and np.allclose(grad[xp > 1e-8], 0, atol=1e-5)


def test_too_large_dense_projection_is_refused() -> None:
    from dpopt.exceptions import InvalidParameterError

    W = wl.kronecker(wl.prefix(80), wl.prefix(80))  # 6400 cells, product strategy
    with pytest.raises(InvalidParameterError, match="structured workload"):
        answer(W, np.zeros(6400), budget=Budget(1.0, 1e-6), rng=0, nonnegative=True)
