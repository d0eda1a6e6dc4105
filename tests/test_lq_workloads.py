"""Workloads of dpopt.linear_queries: closed forms against dense matrices, generators, validation."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from dpopt.exceptions import InvalidParameterError
from dpopt.linear_queries import workloads as wl


def _all_range_dense(n: int) -> np.ndarray:
    rows = []
    for a in range(n):
        for b in range(a, n):
            r = np.zeros(n)
            r[a : b + 1] = 1
            rows.append(r)
    return np.array(rows)


CASES = [
    ("identity", lambda: wl.identity(7), lambda: np.eye(7)),
    ("total", lambda: wl.total(7), lambda: np.ones((1, 7))),
    ("prefix", lambda: wl.prefix(7), lambda: np.tril(np.ones((7, 7)))),
    ("all_range", lambda: wl.all_range(7), lambda: _all_range_dense(7)),
]


@pytest.mark.parametrize(("name", "make", "dense"), CASES, ids=[c[0] for c in CASES])
def test_closed_forms_match_dense(name, make, dense):
    W = make()
    D = dense()
    assert W.shape == D.shape
    np.testing.assert_allclose(W.gram(), D.T @ D)
    np.testing.assert_allclose(W.matrix(), D)
    x = np.random.default_rng(0).normal(size=W.domain_size)
    np.testing.assert_allclose(W.answer(x), D @ x)
    assert W.l2_sensitivity == pytest.approx(np.linalg.norm(D, axis=0).max())
    assert W.l1_sensitivity == pytest.approx(np.abs(D).sum(axis=0).max())
    assert W.frobenius_norm_sq == pytest.approx((D**2).sum())


@pytest.mark.parametrize(
    "make",
    [
        lambda: wl.random_ranges(40, 13, rng=1),
        lambda: wl.random_bernoulli(20, 9, rng=2),
        lambda: wl.random_marginals(30, 16, rng=3),
        lambda: wl.random_related(12, 10, 3, rng=4),
        lambda: wl.from_matrix(sp.random(15, 8, density=0.6, random_state=5) + sp.eye(15, 8)),
    ],
    ids=["ranges", "bernoulli", "marginals", "related", "sparse"],
)
def test_generated_workloads_consistent(make):
    W = make()
    D = W.matrix()
    assert D.shape == W.shape
    np.testing.assert_allclose(W.gram(), D.T @ D, atol=1e-10)
    x = np.random.default_rng(0).normal(size=W.domain_size)
    np.testing.assert_allclose(W.answer(x), D @ x, atol=1e-10)
    assert W.l1_sensitivity == pytest.approx(np.abs(D).sum(axis=0).max())
    assert W.l2_sensitivity == pytest.approx(np.linalg.norm(D, axis=0).max())


def test_generators_reproducible_and_structured():
    a, b = wl.random_ranges(50, 32, rng=7), wl.random_ranges(50, 32, rng=7)
    assert a.fingerprint() == b.fingerprint()
    assert a.fingerprint() != wl.random_ranges(50, 32, rng=8).fingerprint()
    D = a.matrix()
    for row in D:  # contiguous intervals
        idx = np.flatnonzero(row)
        assert idx.size and np.all(np.diff(idx) == 1)
    M = wl.random_marginals(64, 32, rng=0).matrix()
    assert np.all(M.sum(axis=1) == 8)  # n/4 ones per row
    assert np.linalg.matrix_rank(M) <= 1 + 5 + 10
    R = wl.random_related(30, 20, 4, rng=0)
    assert np.linalg.matrix_rank(R.matrix()) == 4
    B = wl.random_bernoulli(30, 20, rng=0, p=0.3).matrix()
    assert set(np.unique(B)) <= {0.0, 1.0}


def test_validation_errors():
    with pytest.raises(InvalidParameterError, match="zero"):
        wl.from_matrix(np.array([[1.0, 0.0], [2.0, 0.0]]))
    assert wl.from_matrix(np.array([[1.0, 0.0]]), allow_zero_columns=True).zero_columns().tolist() == [1]
    with pytest.raises(InvalidParameterError, match="NaN"):
        wl.from_matrix(np.array([[1.0, np.nan]]))
    with pytest.raises(InvalidParameterError, match="NaN"):
        wl.from_matrix(sp.csr_array(np.array([[1.0, np.inf]])))
    with pytest.raises(InvalidParameterError, match="length"):
        wl.prefix(5).answer(np.ones(4))
    with pytest.raises(InvalidParameterError, match="power of two"):
        wl.random_marginals(5, 12, rng=0)
    with pytest.raises(InvalidParameterError):
        wl.ranges([3], [1], 5)
    with pytest.raises(InvalidParameterError):
        wl.random_related(5, 5, 0, rng=0)
    with pytest.raises(InvalidParameterError):
        wl.prefix(0)
    gram = wl.prefix(4).gram()
    with pytest.raises(ValueError):
        gram[0, 0] = 3.0  # read-only cache


def test_kronecker_workload_matches_dense():
    A, B = wl.prefix(3), wl.random_ranges(5, 4, rng=0)
    K = wl.kronecker(A, B)
    D = np.kron(A.matrix(), B.matrix())
    assert K.shape == D.shape == (15, 12)
    np.testing.assert_allclose(K.matrix(), D)
    np.testing.assert_allclose(K.gram(), D.T @ D)
    x = np.random.default_rng(1).normal(size=12)
    np.testing.assert_allclose(K.answer(x), D @ x)
    np.testing.assert_allclose(wl.kron_apply([A.matrix(), B.matrix()], x), D @ x)
    assert K.l2_sensitivity == pytest.approx(np.linalg.norm(D, axis=0).max())
    assert K.l1_sensitivity == pytest.approx(np.abs(D).sum(axis=0).max())
    assert K.frobenius_norm_sq == pytest.approx((D**2).sum())
    assert K.fingerprint() == wl.kronecker(wl.prefix(3), wl.random_ranges(5, 4, rng=0)).fingerprint()
    big = wl.kronecker(wl.prefix(128), wl.prefix(128))
    with pytest.raises(InvalidParameterError, match="factors"):
        big.gram()
    with pytest.raises(InvalidParameterError):
        wl.kronecker()


def test_specs_and_files(tmp_path):
    assert wl.from_spec("prefix:n=16").shape == (16, 16)
    a = wl.from_spec("ranges:m=10,n=8,seed=3")
    assert a.fingerprint() == wl.random_ranges(10, 8, rng=3).fingerprint()
    assert wl.from_spec("prefix:n=4*all_range:n=3").shape == (24, 12)
    assert wl.from_spec("related:m=5,n=4,s=2", rng=0).params["s"] == 2
    for bad in ("nope:n=3", "prefix", "prefix:n=x", "prefix:n"):
        with pytest.raises(InvalidParameterError):
            wl.from_spec(bad)
    D = np.array([[1.0, 0.0, 2.0], [0.0, 1.0, 1.0]])
    np.save(tmp_path / "w.npy", D)
    np.savetxt(tmp_path / "w.csv", D, delimiter=",")
    sp.save_npz(tmp_path / "w.npz", sp.csr_array(D))
    for name in ("w.npy", "w.csv", "w.npz"):
        np.testing.assert_allclose(wl.load(tmp_path / name).matrix(), D)
    with pytest.raises(InvalidParameterError, match="not found"):
        wl.load(tmp_path / "missing.npy")


def test_union_and_marginals():
    M = wl.marginals((4, 3, 5), 2)
    D = M.matrix()
    assert M.shape == D.shape == (4 * 3 + 4 * 5 + 3 * 5, 60)
    np.testing.assert_allclose(M.gram(), D.T @ D)
    x = np.random.default_rng(0).integers(0, 9, 60)
    np.testing.assert_allclose(M.answer(x), D @ x)
    # the (0, 1) marginal sums the last attribute out
    np.testing.assert_allclose(M.answer(x)[:12], x.reshape(4, 3, 5).sum(axis=2).ravel())
    assert M.l2_sensitivity == pytest.approx(np.sqrt(3))
    assert M.l1_sensitivity == pytest.approx(3)
    assert wl.marginals((2, 2), 0).shape == (1, 4)
    with pytest.raises(InvalidParameterError):
        wl.marginals((2, 2), 3)
    with pytest.raises(InvalidParameterError, match="same domain"):
        wl.Union([wl.prefix(3), wl.prefix(4)])
