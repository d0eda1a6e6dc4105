"""HAMSI (compact L-BFGS, schedules, H1 step), mb-GD, determinism across thread counts."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest

from dpopt.datasets import load_movielens, make_low_rank_ratings
from dpopt.distributed.partition import make_partition, strata_b
from dpopt.exceptions import InvalidParameterError
from dpopt.matrix_factorization import MatrixFactorizationProblem, split_ratings
from dpopt.solvers.hamsi import (
    CompactLBFGS,
    HamsiOptions,
    HamsiResult,
    _execution,
    hamsi,
    hamsi_dense,
    hamsi_distributed,
    hamsi_step,
    mbgd,
    subset_schedule,
)


# ----------------------------------------------------------------------------- compact L-BFGS
def two_loop(g: np.ndarray, pairs: list[tuple[np.ndarray, np.ndarray]], sigma: float) -> np.ndarray:
    q = g.copy()
    alphas = []
    for s, y in reversed(pairs):
        a = (s @ q) / (s @ y)
        alphas.append(a)
        q -= a * y
    r = sigma * q
    for (s, y), a in zip(pairs, reversed(alphas), strict=True):
        b = (y @ r) / (s @ y)
        r += s * (a - b)
    return r


@pytest.mark.parametrize("n_pairs", [1, 3, 5, 8, 13])
def test_compact_product_equals_two_loop_recursion(n_pairs: int) -> None:
    rng = np.random.default_rng(n_pairs)
    n, m = 40, 5
    mem = CompactLBFGS(n, m)
    pairs = []
    B = rng.standard_normal((n, n))
    H = B @ B.T / n + np.eye(n)  # SPD: y = H s has sᵀy > 0
    for _ in range(n_pairs):
        s = rng.standard_normal(n)
        y = H @ s
        assert mem.push(s, y)
        pairs.append((s, y))
    pairs = pairs[-m:]
    s, y = pairs[-1]
    sigma = float((s @ y) / (y @ y))
    assert mem.sigma == pytest.approx(sigma, rel=1e-12)
    g = rng.standard_normal(n)
    ref = two_loop(g, pairs, sigma)
    np.testing.assert_allclose(mem.direction(g), ref, rtol=1e-10, atol=1e-12 * np.abs(ref).max())
    assert mem.full == (n_pairs >= m)


def test_curvature_safeguard_and_running_min_sigma() -> None:
    mem = CompactLBFGS(3, 2, sigma_mode="running_min", sigma0=500.0, curvature="reference")
    assert not mem.push(np.array([1.0, 0, 0]), np.array([-1.0, 0, 0]))  # sᵀy < 0
    assert not mem.push(np.array([1e-9, 0, 0]), np.array([1.0, 0, 0]))  # sᵀy/|y| below 1e-6
    assert mem.n_rejected == 2 and mem.size == 0
    assert mem.push(np.array([1.0, 0, 0]), np.array([0.5, 0, 0]))
    assert mem.sigma == pytest.approx(2.0)
    assert mem.push(np.array([0, 1.0, 0]), np.array([0, 4.0, 0]))
    assert mem.sigma == pytest.approx(0.25)
    assert mem.push(np.array([0, 0, 1.0]), np.array([0, 0, 1.0]))
    assert mem.sigma == pytest.approx(0.25)  # running minimum
    rel = CompactLBFGS(2, 2)
    assert not rel.push(np.array([1.0, 0.0]), np.array([1e-12, 1.0]))  # nearly orthogonal
    with pytest.raises(InvalidParameterError, match="memory"):
        CompactLBFGS(3, 0)


# ----------------------------------------------------------------------------- schedules
def test_det_schedule_rotates_with_first_equal_last() -> None:
    it = subset_schedule(5, "det")
    orders = [[k + 1 for k in next(it)] for _ in range(5)]
    assert orders[2:] == [[3, 4, 5, 1, 2, 3], [4, 5, 1, 2, 3, 4], [5, 1, 2, 3, 4, 5]]
    assert orders[0] == [1, 2, 3, 4, 5, 1]
    it = subset_schedule(4, "det", repeat_first=False)
    assert next(it) == [0, 1, 2, 3] and next(it) == [1, 2, 3, 0]
    assert next(subset_schedule(1)) == [0]


def test_stoc_schedule_is_a_permutation_plus_first() -> None:
    it = subset_schedule(6, "stoc", rng=3)
    seen = set()
    for _ in range(20):
        order = next(it)
        assert len(order) == 7 and order[0] == order[-1]
        assert sorted(order[:-1]) == list(range(6))
        seen.add(tuple(order))
    assert len(seen) > 10
    with pytest.raises(InvalidParameterError, match="schedule"):
        next(subset_schedule(3, "random"))  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- H1 with exact Hessian
def test_hamsi_step_is_regularised_newton_on_a_quadratic() -> None:
    rng = np.random.default_rng(0)
    n = 6
    B = rng.standard_normal((n, n))
    A = B @ B.T + 0.1 * np.eye(n)
    b = rng.standard_normal(n)
    x0 = rng.standard_normal(n)
    beta = 0.7
    g = A @ x0 - b
    z = hamsi_step(x0, g, A, beta)
    np.testing.assert_allclose((A + beta * np.eye(n)) @ (z - x0), -g, atol=1e-10)
    # H1 with one subset of one block and the exact Hessian: each epoch is that step with β_t
    alpha = [list(range(n))]
    x1 = hamsi_dense(lambda fn, x: A @ x - b, lambda x: A, x0, [[[0]]], alpha, eta=0.5, gamma=1.0, max_iter=1)
    np.testing.assert_allclose(x1, x0 - np.linalg.solve(A + 0.5 * np.eye(n), A @ x0 - b), rtol=1e-10)
    A1 = A + np.eye(n)
    xs = hamsi_dense(lambda fn, x: A1 @ x - b, lambda x: A1, x0, [[[0]]], alpha, max_iter=60)
    np.testing.assert_allclose(xs, np.linalg.solve(A1, b), rtol=1e-6, atol=1e-8)
    with pytest.raises(InvalidParameterError, match="positive definite"):
        hamsi_step(x0, g, -np.eye(n), 0.5)


def test_hamsi_dense_on_example_cover_converges() -> None:
    """Separable quadratic with the factor-graph of Example 3.0.1 and its valid K = 2 cover."""
    alpha = [[0, 3], [0, 4], [1, 3], [1, 4], [2, 3], [2, 4]]
    rng = np.random.default_rng(1)
    a = rng.uniform(0.5, 1.5, size=(6, 2))
    x_true = rng.standard_normal(5)
    c = np.array([a[i] @ x_true[alpha[i]] for i in range(6)])  # consistent: every f_i can reach 0

    def grad(fn: np.ndarray, x: np.ndarray) -> np.ndarray:  # f_i = ½ (a_i · x_{α_i} - c_i)²
        g = np.zeros(5)
        for i in fn:
            r = a[i] @ x[alpha[i]] - c[i]
            g[alpha[i]] += r * a[i]
        return g

    def hess(x: np.ndarray) -> np.ndarray:
        H = np.zeros((5, 5))
        for i in range(6):
            H[np.ix_(alpha[i], alpha[i])] += np.outer(a[i], a[i])
        return H

    cover = [[[0], [3, 5]], [[2, 4], [1]]]
    x = hamsi_dense(grad, hess, np.zeros(5), cover, alpha, eta=0.06, gamma=0.51, max_iter=400)
    assert np.linalg.norm(grad(np.arange(6), x)) < 1e-3 * np.linalg.norm(grad(np.arange(6), np.zeros(5)))


# ----------------------------------------------------------------------------- MF runs
@pytest.fixture(scope="module")
def synth() -> MatrixFactorizationProblem:
    ratings = make_low_rank_ratings(120, 90, 4, 0.25, rng=11)
    return MatrixFactorizationProblem(ratings, 6)


@pytest.mark.parametrize("scheme", ["strata-b", "hogwild", "color-b", None])
def test_serial_and_parallel_iterates_are_identical(
    synth: MatrixFactorizationProblem, scheme: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_execution, "_PARALLEL_WORK", 0)  # run even these small subsets in parallel
    part = None if scheme is None else make_partition(synth.ratings, scheme, n_subsets=4, n_threads=2, rng=5)
    kw = dict(max_iter=12, rng=3, memory=3, schedule="det")
    r1 = hamsi(synth, part, n_threads=1, **kw)  # type: ignore[arg-type]
    r2 = hamsi(synth, part, n_threads=2, **kw)  # type: ignore[arg-type]
    r3 = hamsi(synth, part, n_threads=2, backend="numba", **kw)  # type: ignore[arg-type]
    for r in (r2, r3):
        assert np.array_equal(r1.U, r.U) and np.array_equal(r1.V, r.V)
        assert np.array_equal(r1.history_rmse, r.history_rmse)
    assert r1.n_pairs_accepted > 0


def test_hamsi_beats_mbgd_and_result_fields(synth: MatrixFactorizationProblem) -> None:
    train, test = split_ratings(synth.ratings, 0.2, rng=0)
    p = MatrixFactorizationProblem(train, 6, l2=1e-3)
    part = strata_b(train, 2)
    h = hamsi(p, part, max_iter=40, rng=1, test=test)
    g = mbgd(p, part, max_iter=40, rng=1, test=test)
    assert isinstance(h, HamsiResult)
    assert h.history_rmse[0] == pytest.approx(g.history_rmse[0])  # same seed, same start
    assert h.rmse < 0.5 * g.rmse
    assert h.rmse < 0.3 * h.history_rmse[0]
    assert h.status == "max_iter" and h.n_epochs == 40 and h.n_steps == 40 * 3
    assert g.n_steps == 40 * 2 and g.n_pairs_accepted == 0
    assert h.history_test_rmse is not None and h.history_test_rmse.shape == h.history_rmse.shape
    assert h.test_rmse is not None and np.isfinite(h.test_rmse)
    assert set(h.timings) == {"gradient", "update", "hessian"}
    assert np.all(np.diff(h.history_time) >= 0) and h.history_time[0] == 0
    assert h.partition_balance["scheme"] == "strata-b"
    with pytest.raises(dataclasses.FrozenInstanceError):
        h.status = "x"  # type: ignore[misc]


def test_stochastic_schedule_is_seeded(synth: MatrixFactorizationProblem) -> None:
    a = hamsi(synth, "hogwild", n_subsets=3, schedule="stoc", max_iter=5, rng=9)
    b = hamsi(synth, "hogwild", n_subsets=3, schedule="stoc", max_iter=5, rng=9)
    c = hamsi(synth, "hogwild", n_subsets=3, schedule="stoc", max_iter=5, rng=10)
    assert np.array_equal(a.U, b.U)
    assert not np.array_equal(a.U, c.U)


def test_time_budget_and_divergence(synth: MatrixFactorizationProblem) -> None:
    r = hamsi(synth, max_iter=10**6, time_budget=0.05, rng=0)
    assert r.status == "max_time" and r.elapsed >= 0.05
    d = mbgd(synth, eta=1e-12, max_iter=50, rng=0)  # absurd steps
    assert d.status == "failed"
    assert np.all(np.isfinite(d.U)) and np.all(np.isfinite(d.V))
    assert d.rmse == min(d.history_rmse) and d.rmse <= d.history_rmse[0]


def test_restart_safeguard_prevents_divergence(synth: MatrixFactorizationProblem) -> None:
    kw = dict(n_subsets=4, beta_counter="outer", max_iter=40, rng=1)
    raw = hamsi(synth, "color-b", safeguard=False, **kw)  # type: ignore[arg-type]
    safe = hamsi(synth, "color-b", **kw)  # type: ignore[arg-type]
    assert raw.status == "failed" and raw.n_restarts == 0
    assert safe.status == "max_iter" and safe.n_restarts > 0
    assert safe.rmse < 0.1 * safe.history_rmse[0]


def test_bad_arguments(synth: MatrixFactorizationProblem) -> None:
    with pytest.raises(InvalidParameterError, match="memory"):
        hamsi(synth, memory=0, rng=0)
    with pytest.raises(InvalidParameterError, match="backend"):
        hamsi(synth, backend="mpi", rng=0)  # type: ignore[arg-type]
    with pytest.raises(InvalidParameterError, match="schedule"):
        hamsi(synth, schedule="cyclic", rng=0)  # type: ignore[arg-type]
    with pytest.raises(InvalidParameterError, match="beta_counter"):
        hamsi(synth, beta_counter="epoch", rng=0)  # type: ignore[arg-type]
    with pytest.raises(InvalidParameterError, match="eta"):
        hamsi(synth, eta=0.0, rng=0)
    other = make_low_rank_ratings(10, 10, 2, 0.5, rng=0)
    with pytest.raises(InvalidParameterError, match="partition"):
        hamsi(synth, strata_b(other, 2), rng=0)
    with pytest.raises(InvalidParameterError, match="problem"):
        hamsi(other, rng=0)  # type: ignore[arg-type]
    with pytest.raises(InvalidParameterError, match="test"):
        hamsi(synth, test=other, rng=0)


def test_movielens_hamsi_far_below_mbgd(shared_datasets: Path) -> None:
    path = shared_datasets / "movielens-100k" / "u.data"
    if not path.is_file():
        pytest.skip(f"MovieLens 100K not found at {path}: put u.data there or set DPOPT_DATASETS")
    p = MatrixFactorizationProblem(load_movielens(path), 50)
    kw = dict(max_iter=60, rng=1453, eval_every=60)
    h = hamsi(p, beta_counter="inner", sigma_mode="running_min", curvature="reference", **kw)  # type: ignore[arg-type]
    g = mbgd(p, **kw)  # type: ignore[arg-type]
    assert 7.5 < h.history_rmse[0] < 8.5
    assert h.rmse < 1.0 and g.rmse > 2.0


# ----------------------------------------------------------------------------- engines
@pytest.mark.parametrize("n_shards", [1, 2, 3])
def test_distributed_matches_in_process_strata_b(synth: MatrixFactorizationProblem, n_shards: int) -> None:
    p = MatrixFactorizationProblem(synth.ratings, 6, l2=1e-3)
    kw = dict(max_iter=10, memory=3, rng=3)
    local = hamsi(p, strata_b(p.ratings, n_shards), safeguard=False, **kw)  # type: ignore[arg-type]
    dist = hamsi_distributed(p, n_shards, safeguard=False, **kw)  # type: ignore[arg-type]
    # same gradients; inner products summed per shard (different rounding only)
    np.testing.assert_allclose(dist.U, local.U, rtol=1e-9, atol=1e-11)
    np.testing.assert_allclose(dist.history_rmse, local.history_rmse, rtol=1e-9)
    assert dist.n_pairs_accepted == local.n_pairs_accepted > 0
    assert dist.scheme == "strata-b/inprocess" and dist.n_epochs == 10


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["processes", "ray"])
def test_distributed_engines_are_bit_identical(
    synth: MatrixFactorizationProblem, engine: str, request: pytest.FixtureRequest
) -> None:
    if "slow" not in str(request.config.getoption("-m") or ""):
        pytest.skip("starts worker processes / a Ray cluster; run with -m slow")
    if engine == "ray":
        pytest.importorskip("ray")
    kw = dict(max_iter=6, memory=3, rng=3)
    ref = hamsi_distributed(synth, 2, **kw)  # type: ignore[arg-type]
    other = hamsi_distributed(synth, 2, engine=engine, **kw)  # type: ignore[arg-type]
    assert np.array_equal(ref.U, other.U) and np.array_equal(ref.V, other.V)


def test_callback_protocol_and_deprecated_max_epochs() -> None:
    synth = MatrixFactorizationProblem(make_low_rank_ratings(40, 30, rank=2, density=0.3, rng=0), rank=2)
    seen: list[int] = []

    def cb(info):  # one protocol: IterationInfo in, True (or StopIteration) stops
        seen.append(info.nit)
        assert info["rmse"] == info.rmse and math.isfinite(info.rmse)
        return info.nit >= 3

    r = hamsi(synth, max_iter=10, rng=0, callback=cb)
    assert r.status == "stopped" and r.nit == r.n_epochs == 3 and seen == [1, 2, 3]
    with pytest.warns(DeprecationWarning, match="max_iter"):
        old = hamsi(synth, max_epochs=4, rng=0)
    assert old.status == "max_iter" and old.nit == 4

    def stop(info):
        raise StopIteration

    d = hamsi_distributed(synth, 2, max_iter=5, rng=0, callback=stop)
    assert d.status == "stopped" and d.nit == 1


# ----------------------------------------------------------------------------- the biased model
def shifted_ratings(m: int, n: int, rank: int, density: float, rng: int, noise: float = 0.5):
    from dpopt.datasets import Ratings

    r = make_low_rank_ratings(m, n, rank, density, rng=rng, noise_std=noise)
    return Ratings(rows=r.rows, cols=r.cols, values=r.values + 3.5, shape=r.shape, name="shifted")


def test_biased_hamsi_fits_and_returns_biases() -> None:
    train, test = split_ratings(shifted_ratings(200, 150, 3, 0.2, 1, noise=0.3), 0.2, rng=0)
    p = MatrixFactorizationProblem.from_als_lambda(train, 3, 1.0, bias=True, allow_empty=True)
    r = hamsi(p, max_iter=150, rng=0, init_scale=None, test=test)
    assert r.success and r.U.shape == (200, 3) and r.V.shape == (150, 3)
    assert r.row_bias is not None and r.col_bias is not None and r.offset == pytest.approx(p.offset)
    assert r.test_rmse is not None and r.test_rmse < 0.45  # noise 0.3: near the noise floor
    # the returned pieces reproduce the history's last RMSE
    assert p.rmse(*p.augment(r.U, r.V, r.row_bias, r.col_bias), test) == pytest.approx(r.test_rmse)
    g = mbgd(p, max_iter=5, rng=0, init_scale=None)
    assert g.row_bias is not None and g.success


def test_biased_distributed_matches_in_process() -> None:
    p = MatrixFactorizationProblem.from_als_lambda(
        shifted_ratings(120, 90, 3, 0.25, 11), 4, 2.0, bias=True, allow_empty=True
    )
    kw = dict(max_iter=8, memory=3, rng=3, init_scale=None)
    local = hamsi(p, strata_b(p.ratings, 2), safeguard=False, **kw)  # type: ignore[arg-type]
    dist = hamsi_distributed(p, 2, safeguard=False, **kw)  # type: ignore[arg-type]
    np.testing.assert_allclose(dist.U, local.U, rtol=1e-9, atol=1e-11)
    assert dist.row_bias is not None and local.row_bias is not None
    np.testing.assert_allclose(dist.row_bias, local.row_bias, rtol=1e-9, atol=1e-11)
    np.testing.assert_allclose(dist.history_rmse, local.history_rmse, rtol=1e-9)


def test_tolerance_stops_and_early_stopping_returns_best_validation() -> None:
    train, val = split_ratings(shifted_ratings(150, 100, 3, 0.2, 2), 0.2, rng=1)
    p = MatrixFactorizationProblem.from_als_lambda(train, 8, 0.01, bias=True, allow_empty=True)
    r = hamsi(p, max_iter=3000, rng=0, init_scale=None, tol=1e-4, patience=3, train_rmse="running")
    assert r.status == "converged" and r.n_epochs < 3000 and "converged" in r.message
    e = hamsi(p, max_iter=3000, rng=0, init_scale=None, test=val, early_stopping=True, tol=1e-3, patience=5)
    assert e.status == "converged" and e.history_test_rmse is not None
    assert e.test_rmse == pytest.approx(float(e.history_test_rmse.min()))  # best-validation factors
    with pytest.raises(InvalidParameterError, match="early_stopping"):
        hamsi(p, rng=0, early_stopping=True)
    with pytest.raises(InvalidParameterError, match="train_rmse"):
        hamsi(p, rng=0, train_rmse="sometimes")  # type: ignore[arg-type]


def test_running_training_rmse_needs_no_extra_pass() -> None:
    p = MatrixFactorizationProblem(shifted_ratings(100, 80, 2, 0.3, 4), 2, bias=True, allow_empty=True)
    r = hamsi(p, max_iter=30, rng=0, init_scale=None, train_rmse="running")
    x = hamsi(p, max_iter=30, rng=0, init_scale=None)
    assert np.array_equal(r.U, x.U)  # same iterates; only the reported training RMSE differs
    assert r.history_rmse[-1] == pytest.approx(x.history_rmse[-2], rel=0.05)  # lags by about an epoch
    assert r.eval_time >= 0 and r.setup_time >= 0 and r.wall_time >= r.elapsed


def test_warm_up_safeguard_recovers_from_overlong_gradient_steps() -> None:
    # 7 ratings: the mean-scaled curvature is large, the warm-up steps of (0.001 t)^-0.51 overshoot
    p = MatrixFactorizationProblem.from_arrays(
        [0, 0, 1, 1, 2, 2, 3], [0, 1, 0, 2, 1, 2, 0], [5.0, 3.0, 4.0, 2.0, 3.0, 1.0, 5.0], rank=2, bias=True
    )
    p = MatrixFactorizationProblem.from_als_lambda(p.ratings, 2, 1.0, bias=True)
    r = hamsi(p, max_iter=60, rng=0, init_scale=None)
    assert r.success and r.n_restarts >= 1 and r.rmse < 0.6
    off = hamsi(p, max_iter=60, rng=0, init_scale=None, safeguard=False)
    assert not off.success or off.rmse > 10  # without the safeguard it blows up


@pytest.mark.parametrize(
    "model",
    [
        "biased",
        pytest.param("centred", marks=pytest.mark.slow),
        pytest.param("uncentred", marks=pytest.mark.slow),
    ],
)
@pytest.mark.parametrize(("partition", "n_threads"), [(None, 1), ("strata-b", 2)])
def test_no_stall_on_the_shifted_synthetic_case(model: str, partition: str | None, n_threads: int) -> None:
    # the synthetic case (rank 10, noise 0.5, ratings around 3.5; benchmarks/bench_mf_peers.py
    # runs it in full) at 1/45 of its size with as many ratings per row, tiny l2, data-scaled start:
    # a small start on uncentred ratings used to stall near zero (RMSE ~3.3).  The iterates do not
    # depend on the thread count, but the STRATA-B cover (P = n_threads) changes them.
    train, test = split_ratings(shifted_ratings(600, 300, 10, 0.25, 0), 0.2, rng=0)
    kw = {"biased": {"bias": True}, "centred": {"offset": float(train.values.mean())}, "uncentred": {}}[model]
    p = MatrixFactorizationProblem(train, 10, l2=1e-6, allow_empty=True, **kw)  # type: ignore[arg-type]
    r = hamsi(
        p,
        partition,
        max_iter=150,
        rng=0,
        init_scale=None,
        test=test,
        n_threads=n_threads,
        tol=1e-4,
        patience=5,
    )
    assert r.success and r.test_rmse is not None
    if model == "uncentred":  # fits, though worse than the centred models
        assert r.rmse < 0.6 and r.test_rmse < 0.8
    else:  # near the noise level (0.5)
        assert r.rmse < 0.45 and r.test_rmse < 0.62


def test_tolerance_never_fires_during_the_gradient_warm_up() -> None:
    # tiny warm-up steps (as on large mean-scaled problems) make no progress for `memory` steps;
    # that is not convergence
    p = MatrixFactorizationProblem(shifted_ratings(150, 100, 3, 0.2, 5), 3, bias=True, allow_empty=True)
    r = hamsi(p, max_iter=200, rng=0, init_scale=None, eta_gd=1e6, memory=5, tol=1e-3, patience=2)
    assert r.n_epochs > 5 + 2
    assert r.rmse < 0.8 * r.history_rmse[0]


# ---------------------------------------------------------------- durable resume (issue 14 §2)
@pytest.mark.parametrize(("partition", "schedule"), [(None, "det"), ("hogwild", "stoc")])
def test_resume_from_checkpoint_equals_an_uninterrupted_run(
    tmp_path: Path, partition: str | None, schedule: str
) -> None:
    r = make_low_rank_ratings(60, 40, 3, 0.5, rng=1, noise_std=0.1)
    p = MatrixFactorizationProblem(r, 3, bias=True, l2=1e-3)
    kw: dict[str, object] = {
        "partition": partition,
        "schedule": schedule,
        "rng": 7,
        "init_scale": None,
        "n_subsets": 4,
    }
    full = hamsi(p, max_iter=12, **kw)
    first = hamsi(p, max_iter=5, checkpoint_dir=tmp_path, checkpoint_every=5, **kw)
    assert first.n_epochs == 5 and [f.name for f in tmp_path.iterdir()] == ["hamsi_state.npz"]
    resumed = hamsi(p, max_iter=12, checkpoint_dir=tmp_path, resume=True, **kw)
    assert resumed.n_epochs == 12 and resumed.n_steps == full.n_steps
    assert resumed.n_restarts == full.n_restarts
    np.testing.assert_array_equal(resumed.U, full.U)
    np.testing.assert_array_equal(resumed.V, full.V)
    np.testing.assert_array_equal(resumed.history_rmse, full.history_rmse)
    np.testing.assert_array_equal(resumed.history_epoch, full.history_epoch)
    # a state saved by a different run is refused; resume needs a directory
    with pytest.raises(InvalidParameterError, match="differs"):
        hamsi(p, max_iter=12, checkpoint_dir=tmp_path, resume=True, memory=3, **kw)
    with pytest.raises(InvalidParameterError, match="checkpoint_dir"):
        hamsi(p, max_iter=2, resume=True, **kw)


# ----------------------------------------------------------------------------- options object
def test_options_object_is_checked_once_and_equals_the_keywords() -> None:
    synth = MatrixFactorizationProblem(make_low_rank_ratings(40, 30, rank=2, density=0.3, rng=0), rank=2)
    opts = HamsiOptions(max_iter=5, memory=3, eta=0.1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        opts.eta = 1.0  # type: ignore[misc]
    a = hamsi(synth, options=opts, rng=0)
    b = hamsi(synth, max_iter=5, memory=3, eta=0.1, rng=0)
    assert np.array_equal(a.U, b.U) and np.array_equal(a.history_rmse, b.history_rmse)
    c = hamsi(synth, options=opts, max_iter=2, rng=0)  # keywords override the object's fields
    assert c.n_epochs == 2 and c.options["memory"] == 3
    with pytest.raises(InvalidParameterError, match="eta"):
        HamsiOptions(eta=0.0)
    with pytest.raises(InvalidParameterError, match="options"):
        hamsi(synth, options={"eta": 0.1}, rng=0)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="memory"):
        mbgd(synth, memory=3, rng=0)  # mb-GD has no L-BFGS memory
    with pytest.raises(TypeError, match="stall_window"):
        hamsi(synth, stall_window=3, rng=0)
    g = HamsiOptions.for_solver("mbgd", max_iter=3)
    assert (g.eta, g.beta_counter, g.beta_floor) == (0.001, "outer", 0.0)
    assert np.array_equal(mbgd(synth, options=g, rng=0).U, mbgd(synth, max_iter=3, rng=0).U)
    d = HamsiOptions.for_solver("hamsi_distributed", memory=3)
    assert (d.max_iter, d.checkpoint_every) == (20, 5)
    r = hamsi_distributed(synth, 2, options=d, max_iter=4, rng=0)
    assert r.n_epochs == 4 and r.options["memory"] == 3
