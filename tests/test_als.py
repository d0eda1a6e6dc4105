"""ALS (dpopt.solvers.als): exact block minimisation, monotone objective, thread independence, stopping."""

from __future__ import annotations

import numpy as np
import pytest

from dpopt.datasets import Ratings, make_low_rank_ratings
from dpopt.exceptions import InvalidParameterError
from dpopt.matrix_factorization import MatrixFactorizationProblem, split_ratings
from dpopt.solvers.als import als, als_sweeps
from dpopt.solvers.hamsi import hamsi


def shifted(m: int = 120, n: int = 80, rank: int = 3, density: float = 0.3, rng: int = 0) -> Ratings:
    r = make_low_rank_ratings(m, n, rank, density, rng=rng, noise_std=0.3)
    return Ratings(rows=r.rows, cols=r.cols, values=r.values + 3.0, shape=r.shape, name="shifted")


@pytest.mark.parametrize("bias", [True, False])
def test_converges_to_a_stationary_point_with_a_monotone_objective(bias: bool) -> None:
    p = MatrixFactorizationProblem.from_als_lambda(shifted(), 3, 2.0, bias=bias)
    res = als(p, rng=0, tol=0.0, max_iter=200)
    assert res.status == "max_iter" and res.n_epochs == 200 and res.method == "als"
    U, V = p.augment(res.U, res.V, res.row_bias, res.col_bias) if bias else (res.U, res.V)
    gU, gV = p.gradient(U, V)
    # a zero gradient: ALS minimises the same objective as the gradient methods (at 200 sweeps
    # the largest entry was 1e-16 with biases, 4e-12 without)
    assert max(np.abs(gU).max(), np.abs(gV).max()) < 1e-9
    # the free training RMSE of a sweep is the exact one
    assert res.rmse == pytest.approx(p.rmse(U, V), rel=1e-9)
    # every sweep lowers the objective
    U, V = p.init_factors(rng=0, scale=0.3)
    losses = [p.loss(U, V)]
    for _ in range(6):
        U, V = als_sweeps(p, U, V, 1)
        losses.append(p.loss(U, V))
    assert np.all(np.diff(losses) <= 1e-12 * losses[0]) and losses[-1] < 0.9 * losses[0]


def test_each_half_sweep_is_the_exact_ridge_solution() -> None:
    r = shifted(60, 40, 2, 0.4, rng=3)
    p = MatrixFactorizationProblem.from_als_lambda(r, 2, 1.5, bias=True)
    U0, V0 = p.init_factors(rng=1, scale=0.5)
    U1, V1 = als_sweeps(p, U0, V0, 1)
    # row 7's (U_a, p_a) by a dense least-squares solve with V0 fixed
    a = 7
    mask = r.rows == a
    cols, y = r.cols[mask], r.values[mask] - p.offset
    L = p.rank
    X = np.hstack([V0[cols, :L], np.ones((cols.shape[0], 1))])
    t = y - V0[cols, L + 1]
    sol = np.linalg.solve(X.T @ X + 1.5 * np.eye(L + 1), X.T @ t)
    np.testing.assert_allclose(U1[a, : L + 1], sol, rtol=1e-9, atol=1e-12)
    assert U1[a, L + 1] == 1.0 and np.all(V1[:, L] == 1.0)  # the columns of ones stay fixed
    # a planted error (the ridge weight of the objective, not the ALS scale) would be caught
    wrong = np.linalg.solve(X.T @ X + p.l2 * np.eye(L + 1), X.T @ t)
    assert not np.allclose(U1[a, : L + 1], wrong, rtol=1e-6)
    # the inputs are left as they were
    assert np.array_equal(U0, p.init_factors(rng=1, scale=0.5)[0])


def test_results_do_not_depend_on_the_thread_count() -> None:
    p = MatrixFactorizationProblem.from_als_lambda(shifted(), 3, 1.0, bias=True)
    a = als(p, rng=2, max_iter=6, tol=0.0, n_threads=1)
    b = als(p, rng=2, max_iter=6, tol=0.0, n_threads=2)
    assert np.array_equal(a.U, b.U) and np.array_equal(a.col_bias, b.col_bias)  # type: ignore[arg-type]
    np.testing.assert_array_equal(a.history_rmse, b.history_rmse)


def test_stops_when_done_and_early_stopping_returns_the_best_validation_factors() -> None:
    train, val = split_ratings(shifted(rng=5), 0.2, rng=0)
    p = MatrixFactorizationProblem.from_als_lambda(train, 3, 1.0, bias=True)
    res = als(p, rng=0, max_iter=200, tol=1e-4)
    assert res.status == "converged" and res.n_epochs < 50
    loose = als(p, rng=0, max_iter=200, tol=1e-2)
    assert loose.n_epochs < res.n_epochs
    es = als(p, rng=0, max_iter=30, tol=0.0, test=val, early_stopping=True)
    assert es.history_test_rmse is not None
    assert es.test_rmse == pytest.approx(float(es.history_test_rmse.min()))
    assert p.rmse(*p.augment(es.U, es.V, es.row_bias, es.col_bias), val) == pytest.approx(es.test_rmse)
    with pytest.raises(InvalidParameterError, match="early_stopping"):
        als(p, rng=0, early_stopping=True)
    stopped = als(p, rng=0, tol=0.0, max_iter=50, callback=lambda info: info.nit >= 3)
    assert stopped.status == "stopped" and stopped.n_epochs == 3


def test_empty_rows_zero_ridge_and_warm_start_for_hamsi() -> None:
    r = shifted(50, 30, 2, 0.4, rng=7)
    keep = r.rows != 4  # row 4 has no rating
    r = Ratings(rows=r.rows[keep], cols=r.cols[keep], values=r.values[keep], shape=r.shape, name="gap")
    p = MatrixFactorizationProblem.from_als_lambda(r, 2, 0.5, bias=True, allow_empty=True)
    res = als(p, rng=0, max_iter=10)
    assert res.success and np.all(res.U[4] == 0.0) and res.row_bias[4] == 0.0  # type: ignore[index]
    p0 = MatrixFactorizationProblem(r, 2, bias=True, l2=0.0, allow_empty=True)
    assert np.isfinite(als(p0, rng=0, max_iter=5).rmse)  # unregularized: jitter keeps solves finite
    U, V = als_sweeps(p, *p.init_factors(rng=0, scale="spectral"), 3)
    warm = hamsi(p, init=(U, V), max_iter=3, rng=0)
    cold = hamsi(p, init_scale=None, max_iter=3, rng=0)
    assert warm.rmse < cold.rmse


def test_count_weighted_ridge_row_solve_gradient_and_stationarity() -> None:
    """ALS-WR (``l2_weighting="count"``): each row's ridge is ``λ n_a``."""
    r = shifted(60, 40, 2, 0.4, rng=3)
    lam = 0.2
    p = MatrixFactorizationProblem.from_als_lambda(r, 2, lam, bias=True, l2_weighting="count")
    U0, V0 = p.init_factors(rng=1, scale=0.5)
    U1, _ = als_sweeps(p, U0, V0, 1)
    a = 7
    mask = r.rows == a
    n_a = int(mask.sum())
    cols, y = r.cols[mask], r.values[mask] - p.offset
    L = p.rank
    X = np.hstack([V0[cols, :L], np.ones((cols.shape[0], 1))])
    t = y - V0[cols, L + 1]
    sol = np.linalg.solve(X.T @ X + lam * n_a * np.eye(L + 1), X.T @ t)
    np.testing.assert_allclose(U1[a, : L + 1], sol, rtol=1e-9, atol=1e-12)
    # planted wrong weights are refuted: the uniform ridge λ, and the column count of the item side
    for wrong_w in (lam, lam * r.n_ratings / r.shape[1] / 1.0):
        wrong = np.linalg.solve(X.T @ X + wrong_w * np.eye(L + 1), X.T @ t)
        assert not np.allclose(U1[a, : L + 1], wrong, rtol=1e-6)
    # the problem's gradient is the one of its loss (central differences on a few coordinates)
    U, V = p.init_factors(rng=2, scale=0.5)
    gU, gV = p.gradient(U, V)
    h = 1e-6
    for M, G, i, j in ((U, gU, 3, 0), (U, gU, 5, L), (V, gV, 4, 1), (V, gV, 9, L + 1)):
        Mp, Mm = M.copy(), M.copy()
        Mp[i, j] += h
        Mm[i, j] -= h
        args_p = (Mp, V) if M is U else (U, Mp)
        args_m = (Mm, V) if M is U else (U, Mm)
        fd = (p.loss(*args_p) - p.loss(*args_m)) / (2 * h)
        assert G[i, j] == pytest.approx(fd, rel=1e-5, abs=1e-10)
    # ALS converges to a stationary point of that objective (and not of the uniform one)
    res = als(p, rng=0, tol=0.0, max_iter=200)
    Uf, Vf = p.augment(res.U, res.V, res.row_bias, res.col_bias)
    gU, gV = p.gradient(Uf, Vf)
    assert max(np.abs(gU).max(), np.abs(gV).max()) < 1e-9
    pu = MatrixFactorizationProblem.from_als_lambda(r, 2, lam, bias=True)
    gU, gV = pu.gradient(Uf, Vf)
    assert max(np.abs(gU).max(), np.abs(gV).max()) > 1e-4


def test_count_weighting_is_refused_by_the_gradient_solvers() -> None:
    p = MatrixFactorizationProblem.from_als_lambda(shifted(), 3, 0.1, bias=True, l2_weighting="count")
    with pytest.raises(InvalidParameterError, match=r"l2_weighting='count'.*'als' solver"):
        hamsi(p, rng=0, max_iter=1)
    with pytest.raises(InvalidParameterError, match="l2_weighting: must be"):
        MatrixFactorizationProblem(shifted(), 3, l2_weighting="rows")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("n_shards", "bias", "weighting"), [(1, True, "uniform"), (2, True, "uniform"), (3, False, "count")]
)
def test_distributed_als_equals_als(n_shards: int, bias: bool, weighting: str) -> None:
    from dpopt.solvers.als import als_distributed

    train, val = split_ratings(shifted(130, 90, 3, 0.3, rng=2), 0.2, rng=0)
    lam = 2.0 if weighting == "uniform" else 0.05
    p = MatrixFactorizationProblem.from_als_lambda(
        train,
        3,
        lam,
        bias=bias,
        allow_empty=True,
        l2_weighting=weighting,  # type: ignore[arg-type]
    )
    ref = als(p, rng=0, test=val)
    got = als_distributed(p, n_shards, rng=0, test=val)
    # the same row solves against the same factors: identical iterates, the same stopping sweep
    assert got.n_epochs == ref.n_epochs and got.status == ref.status == "converged"
    np.testing.assert_array_equal(got.U, ref.U)
    np.testing.assert_array_equal(got.V, ref.V)
    if bias:
        assert ref.row_bias is not None and got.row_bias is not None
        np.testing.assert_array_equal(got.row_bias, ref.row_bias)
    np.testing.assert_allclose(got.history_rmse, ref.history_rmse, rtol=1e-12)
    assert got.history_test_rmse is not None and ref.history_test_rmse is not None
    np.testing.assert_allclose(got.history_test_rmse, ref.history_test_rmse, rtol=1e-12)
    assert got.scheme == "shards/inprocess"
    # the comparison has power: a run that stops a sweep early (one sweep) differs from it
    stale = als_distributed(p, n_shards, rng=0, max_iter=1, tol=0.0)
    once = als(p, rng=0, max_iter=1, tol=0.0)
    np.testing.assert_array_equal(stale.U, once.U)
    assert not np.array_equal(stale.U, ref.U)
    # early stopping and the recommender's front door
    es = als_distributed(p, n_shards, rng=0, test=val, early_stopping=True)
    assert es.test_rmse == pytest.approx(float(np.min(es.history_test_rmse)))  # type: ignore[arg-type]


def test_recommender_with_distributed_als() -> None:
    from dpopt.recommender import MFRecommender

    train, test = split_ratings(shifted(100, 70, 2, 0.3, rng=5), 0.2, rng=0)
    a = MFRecommender(rank=2, l2=1.0, bias="mean", rng=0).fit(train)
    b = MFRecommender(rank=2, l2=1.0, bias="mean", solver="als_distributed", n_threads=2, rng=0).fit(train)
    assert b.result_ is not None and b.result_.options["n_shards"] == 2
    np.testing.assert_array_equal(a.predict(test.rows, test.cols), b.predict(test.rows, test.cols))
    with pytest.raises(InvalidParameterError, match="n_shards"):
        MFRecommender(rank=2, solver="als_distributed", solver_options={"n_shards": 0}).fit(train)


@pytest.mark.slow  # starts a local Ray cluster (~20-30 s on the shared machine)
def test_distributed_als_on_ray_equals_als() -> None:
    from dpopt.distributed.engines import ray_available
    from dpopt.solvers.als import als_distributed

    if not ray_available():
        pytest.skip("ray is not installed")
    p = MatrixFactorizationProblem.from_als_lambda(shifted(130, 90, 3, 0.3, rng=2), 3, 2.0, bias=True)
    ref = als(p, rng=0)
    got = als_distributed(p, 2, engine="ray", rng=0)
    assert got.scheme == "shards/ray" and got.n_epochs == ref.n_epochs
    np.testing.assert_array_equal(got.U, ref.U)
    np.testing.assert_array_equal(got.V, ref.V)
