"""answer() evaluates named and array strategies once (issue 16 a)."""

from __future__ import annotations

import numpy as np
import pytest

from dpopt.accounting import Budget
from dpopt.linear_queries import baselines, mechanism, query_variances
from dpopt.linear_queries import workloads as wl
from dpopt.linear_queries.mechanism import answer, expected_error


def _count_calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    calls: list[str] = []
    real = mechanism.evaluate_strategy
    real_svd = mechanism.sla.svd

    def counted(*args, **kwargs):
        calls.append("evaluate")
        return real(*args, **kwargs)

    def counted_svd(*args, **kwargs):
        calls.append("svd")
        return real_svd(*args, **kwargs)

    monkeypatch.setattr(mechanism, "evaluate_strategy", counted)
    monkeypatch.setattr(mechanism.sla, "svd", counted_svd)
    return calls


def test_array_and_named_strategies_are_factorized_once(monkeypatch: pytest.MonkeyPatch) -> None:
    mechanism.clear_caches()
    calls = _count_calls(monkeypatch)
    W = wl.prefix(32)
    x = np.arange(32)
    A = baselines.hierarchical_matrix(32)
    b = Budget(1.0, 1e-6)
    first = [answer(W, x, budget=b, rng=0, strategy=A)]
    once = list(calls)
    assert once.count("evaluate") == 1
    first += [answer(W, x, budget=b, rng=s, strategy=A) for s in range(1, 4)]
    assert calls == once  # the later releases redo nothing
    assert len({r.expected_error for r in first}) == 1
    answer(W, x, budget=b, rng=0, strategy="hierarchical")
    calls.clear()
    for s in range(3):
        answer(W, x, budget=b, rng=s, strategy="hierarchical")
    assert calls == []
    calls.clear()
    query_variances(W, mechanism._resolve_strategy(W, "hierarchical"), b)
    assert calls == []  # the per-query errors reuse the cached factors


def test_identity_is_never_factorized(monkeypatch: pytest.MonkeyPatch) -> None:
    mechanism.clear_caches()
    calls = _count_calls(monkeypatch)
    W = wl.marginals((20, 30, 40), 2)  # n = 24,000: a dense SVD would take minutes
    x = np.random.default_rng(0).integers(0, 5, size=W.domain_size)
    b = Budget(1.0, 1e-6)
    out = answer(W, x, budget=b, rng=0, strategy="identity")
    assert calls == []
    assert out.expected_error == pytest.approx(out.sigma**2 * W.domain_size * 3)
    res = mechanism._resolve_strategy(W, "identity")
    var = query_variances(W, res, b)
    assert var.sum() == pytest.approx(out.expected_error)
    assert expected_error(res, b) == pytest.approx(out.expected_error)
    # identity on a small workload agrees with the dense evaluation
    small = wl.prefix(8)
    dense = answer(small, np.ones(8), budget=b, rng=0, strategy=np.eye(8))
    fast = answer(small, np.ones(8), budget=b, rng=0, strategy="identity")
    assert fast.expected_error == pytest.approx(dense.expected_error)
    np.testing.assert_allclose(fast.values, dense.values)
