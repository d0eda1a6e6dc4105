"""Matrix-factorization problem: objective, compiled gradients, validation, train/test split."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from dpopt.datasets import Ratings, load_movielens, make_low_rank_ratings
from dpopt.exceptions import InvalidParameterError
from dpopt.matrix_factorization import MatrixFactorizationProblem, split_ratings
from dpopt.solvers import _mf_kernels


def small_problem(l2: float = 0.0, scaling: str = "mean", rank: int = 3) -> MatrixFactorizationProblem:
    ratings = make_low_rank_ratings(12, 9, 2, 0.6, rng=3)
    return MatrixFactorizationProblem(ratings, rank, l2=l2, scaling=scaling)  # type: ignore[arg-type]


def dense_loss(p: MatrixFactorizationProblem, U: np.ndarray, V: np.ndarray) -> float:
    r = p.ratings
    res = r.values - np.einsum("ij,ij->i", U[r.rows], V[r.cols])
    w = 1 / r.n_ratings if p.scaling == "mean" else 2.0
    return 0.5 * w * float(res @ res) + 0.5 * p.l2 * float((U**2).sum() + (V**2).sum())


@pytest.mark.parametrize(("l2", "scaling"), [(0.0, "mean"), (0.3, "mean"), (0.1, "sum")])
def test_loss_matches_dense_formula(l2: float, scaling: str) -> None:
    p = small_problem(l2, scaling)
    U, V = p.init_factors(rng=0)
    assert p.loss(U, V) == pytest.approx(dense_loss(p, U, V), rel=1e-12)


@pytest.mark.parametrize(("l2", "scaling"), [(0.0, "mean"), (0.3, "mean"), (0.1, "sum")])
def test_gradient_matches_finite_differences(l2: float, scaling: str) -> None:
    p = small_problem(l2, scaling)
    U, V = p.init_factors(rng=1, scale=0.7)
    gU, gV = p.gradient(U, V)
    x = p.pack(U, V)
    g = np.concatenate([gU.ravel(), gV.ravel()])
    h = 1e-6
    fd = np.empty_like(x)
    for i in range(x.shape[0]):
        e = np.zeros_like(x)
        e[i] = h
        fd[i] = (p.loss(*p.unpack(x + e)) - p.loss(*p.unpack(x - e))) / (2 * h)
    np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-8)


def test_gradient_is_thread_count_invariant_and_matches_a_serial_pass() -> None:
    ratings = make_low_rank_ratings(300, 200, 5, 0.1, rng=2)
    p = MatrixFactorizationProblem(ratings, 8, allow_empty=True)
    U, V = p.init_factors(rng=0)
    g1 = p.gradient(U, V, n_threads=1)
    g2 = p.gradient(U, V, n_threads=2)
    assert np.array_equal(g1[0], g2[0]) and np.array_equal(g1[1], g2[1])
    gU = np.zeros_like(U)
    gV = np.zeros_like(V)
    ptr = np.array([0, p.n_ratings], dtype=np.int64)
    _mf_kernels.strata_gradient(U, V, p.rows, p.cols, p.values, ptr, 1, p.weight, gU, gV, np.zeros(1))
    np.testing.assert_allclose(gU, g1[0], rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(gV, g1[1], rtol=1e-12, atol=1e-15)
    # the grid layout: blocks of one stratum touch disjoint rows and columns
    G = p.grid
    for s in range(G):
        seen_r: set[int] = set()
        seen_c: set[int] = set()
        for r in range(G):
            lo, hi = p._ptr[s * G + r], p._ptr[s * G + r + 1]
            rows, cols = set(p.rows[lo:hi].tolist()), set(p.cols[lo:hi].tolist())
            assert not rows & seen_r and not cols & seen_c
            seen_r |= rows
            seen_c |= cols


def test_rmse_and_sse() -> None:
    p = small_problem()
    U, V = p.init_factors(rng=0)
    r = p.ratings
    res = r.values - np.einsum("ij,ij->i", U[r.rows], V[r.cols])
    assert p.rmse(U, V) == pytest.approx(float(np.sqrt(np.mean(res**2))), rel=1e-12)
    assert p.rmse(U, V, r) == pytest.approx(p.rmse(U, V), rel=1e-12)


def test_pack_unpack_roundtrip() -> None:
    p = small_problem()
    U, V = p.init_factors(rng=0)
    x = p.pack(U, V)
    U2, V2 = p.unpack(x)
    assert np.array_equal(U, U2) and np.array_equal(V, V2)
    assert x.shape == (p.n_params,) == ((12 + 9) * 3,)


@pytest.mark.parametrize("rank", [0, -1, 2.5, True])
def test_bad_rank_raises(rank: object) -> None:
    ratings = make_low_rank_ratings(5, 4, 1, 1.0, rng=0)
    with pytest.raises(InvalidParameterError, match="rank"):
        MatrixFactorizationProblem(ratings, rank)  # type: ignore[arg-type]


def test_out_of_range_ids_raise() -> None:
    with pytest.raises(InvalidParameterError, match="outside shape"):
        MatrixFactorizationProblem.from_arrays([0, 1, 5], [0, 1, 1], [1.0, 2.0, 3.0], rank=2, shape=(3, 2))
    with pytest.raises(InvalidParameterError, match="non-negative"):
        MatrixFactorizationProblem.from_arrays([0, -1], [0, 1], [1.0, 2.0], rank=2)
    with pytest.raises(InvalidParameterError, match="whole numbers"):
        MatrixFactorizationProblem.from_arrays([0, 0.5], [0, 1], [1.0, 2.0], rank=2)


def test_empty_rows_and_columns_raise_unless_allowed() -> None:
    rows, cols, vals = [0, 2], [0, 1], [1.0, 2.0]  # row 1 is empty
    with pytest.raises(InvalidParameterError, match="no rating"):
        MatrixFactorizationProblem.from_arrays(rows, cols, vals, rank=2)
    with pytest.raises(InvalidParameterError, match="no rating"):
        MatrixFactorizationProblem.from_arrays([0, 1], [0, 0], [1.0, 2.0], rank=1, shape=(2, 3))
    p = MatrixFactorizationProblem.from_arrays(rows, cols, vals, rank=2, allow_empty=True)
    assert p.shape == (3, 2)


def test_other_bad_inputs() -> None:
    ratings = make_low_rank_ratings(5, 4, 1, 1.0, rng=0)
    with pytest.raises(InvalidParameterError, match="l2"):
        MatrixFactorizationProblem(ratings, 2, l2=-1.0)
    with pytest.raises(InvalidParameterError, match="scaling"):
        MatrixFactorizationProblem(ratings, 2, scaling="median")  # type: ignore[arg-type]
    with pytest.raises(InvalidParameterError, match="Ratings"):
        MatrixFactorizationProblem((1, 2, 3), 2)  # type: ignore[arg-type]
    with pytest.raises(InvalidParameterError, match="NaN"):
        MatrixFactorizationProblem.from_arrays([0], [0], [np.nan], rank=1)
    p = MatrixFactorizationProblem(ratings, 2)
    with pytest.raises(InvalidParameterError, match="shapes"):
        p.loss(np.zeros((5, 3)), np.zeros((4, 2)))


def test_split_ratings_keeps_every_row_and_column_in_train() -> None:
    ratings = make_low_rank_ratings(40, 30, 2, 0.15, rng=5)
    train, test = split_ratings(ratings, 0.3, rng=1)
    assert train.n_ratings + test.n_ratings == ratings.n_ratings
    assert train.shape == test.shape == ratings.shape
    for idx, size in ((ratings.rows, 40), (ratings.cols, 30)):
        had = np.bincount(idx, minlength=size) > 0
        in_train = np.bincount(train.rows if idx is ratings.rows else train.cols, minlength=size) > 0
        assert np.array_equal(had, in_train)
    assert 0.2 < test.n_ratings / ratings.n_ratings <= 0.3
    # disjoint and complete
    key = lambda r: set(zip(r.rows.tolist(), r.cols.tolist(), strict=True))  # noqa: E731
    assert key(train) | key(test) == key(ratings) and not key(train) & key(test)
    again = split_ratings(ratings, 0.3, rng=1)
    assert np.array_equal(again[1].rows, test.rows)


def test_movielens_100k_initial_rmse(shared_datasets: Path) -> None:
    path = shared_datasets / "movielens-100k" / "u.data"
    if not path.is_file():
        pytest.skip(f"MovieLens 100K not found at {path}: put u.data there or set DPOPT_DATASETS")
    r = load_movielens(path)
    p = MatrixFactorizationProblem(r, 50)
    U, V = p.init_factors(rng=0)
    # N(0,1) factors, rank 50: RMSE ≈ sqrt(50 + E[y²]) ≈ 8 (spec §2.10)
    assert 7.5 < p.rmse(U, V) < 8.5
    assert isinstance(r, Ratings)


def test_block_shares_cover_each_block_once_and_balance_work() -> None:
    from dpopt.solvers._mf_kernels import _share_blocks

    sizes = np.array([5, 9, 1, 7, 3, 8, 2, 6])  # two strata of four blocks
    for threads in (1, 2, 3, 8):
        groups = _share_blocks(sizes, 4, 4, threads)
        assert len(groups) == min(threads, 4)
        assert sorted(np.concatenate(groups).tolist()) == [4, 5, 6, 7]
    loads = sorted(int(sizes[g].sum()) for g in _share_blocks(sizes, 0, 4, 2))
    assert loads == [10, 12]  # LPT: {9, 1} vs {7, 5}


def test_from_arrays_names_the_bad_entry_never_its_value() -> None:
    with pytest.raises(InvalidParameterError, match=r"values: entry 1 is text that is not a number") as info:
        MatrixFactorizationProblem.from_arrays([0, 1, 0], [0, 0, 1], [1.0, "SECRET42", 3.0], rank=2)
    assert "SECRET42" not in str(info.value)
    with pytest.raises(InvalidParameterError, match=r"rows: entry 2 is text") as info:
        MatrixFactorizationProblem.from_arrays([0, 1, "SECRET42"], [0, 0, 1], [1.0, 2.0, 3.0], rank=2)
    assert "SECRET42" not in str(info.value)
    with pytest.raises(InvalidParameterError, match="lengths 3, 2 and 3"):
        MatrixFactorizationProblem.from_arrays([0, 1, 0], [0, 1], [1.0, 2.0, 3.0], rank=2)


def test_huge_rank_is_refused_with_the_memory_estimate_before_allocating() -> None:
    from dpopt.solvers.hamsi import hamsi

    problem = MatrixFactorizationProblem.from_arrays([0, 1, 1], [0, 0, 1], [1.0, 2.0, 3.0], rank=10**9)
    with pytest.raises(InvalidParameterError, match=r"rank=1000000000 .* would need ~536 GiB of memory"):
        hamsi(problem, max_iter=1, rng=0)
    with pytest.raises(InvalidParameterError, match=r"rank=1000000000: the factors .* would need"):
        problem.init_factors(rng=0)


# ----------------------------------------------------------------------------- the biased model
def biased_problem(
    l2: float = 0.05, l2_bias: float | None = 0.02, rank: int = 3
) -> MatrixFactorizationProblem:
    r = make_low_rank_ratings(12, 9, 2, 0.6, rng=3)
    r = Ratings(rows=r.rows, cols=r.cols, values=r.values + 3.0, shape=r.shape, name="shifted")
    return MatrixFactorizationProblem(r, rank, l2=l2, l2_bias=l2_bias, bias=True, clip=(2.0, 4.0))


def test_biased_model_loss_gradient_and_fixed_columns() -> None:
    p = biased_problem()
    assert p.width == 5 and p.offset == pytest.approx(float(p.ratings.values.mean()))
    gen = np.random.default_rng(0)
    U, V = gen.standard_normal((12, 3)), gen.standard_normal((9, 3))
    bu, bi = gen.standard_normal(12), gen.standard_normal(9)
    Uw, Vw = p.augment(U, V, bu, bi)
    r = p.ratings
    pred = p.offset + bu[r.rows] + bi[r.cols] + np.einsum("ij,ij->i", U[r.rows], V[r.cols])
    dense = 0.5 / r.n_ratings * float(((r.values - pred) ** 2).sum())
    dense += 0.5 * 0.05 * float((U**2).sum() + (V**2).sum()) + 0.5 * 0.02 * float(
        (bu**2).sum() + (bi**2).sum()
    )
    assert p.loss(Uw, Vw) == pytest.approx(dense, rel=1e-12)
    gU, gV = p.gradient(Uw, Vw, n_threads=2)
    assert np.all(gU[:, 4] == 0) and np.all(gV[:, 3] == 0)  # the columns of ones never move
    x = p.pack(Uw, Vw)
    g = np.concatenate([gU.ravel(), gV.ravel()])
    fd = np.empty_like(x)
    for i in range(x.shape[0]):
        e = np.zeros_like(x)
        e[i] = 1e-6
        fd[i] = (p.loss(*p.unpack(x + e)) - p.loss(*p.unpack(x - e))) / 2e-6
    free = np.ones_like(x, dtype=bool)
    Uf, Vf = p.unpack(free.astype(float))
    Uf[:, 4] = 0
    Vf[:, 3] = 0
    mask = np.concatenate([Uf.ravel(), Vf.ravel()]).astype(bool)
    np.testing.assert_allclose(g[mask], fd[mask], rtol=1e-6, atol=1e-8)
    # split / augment round trip; plain factors are accepted where working factors are expected
    U2, V2, bu2, bi2 = p.split(Uw, Vw)
    assert (
        np.array_equal(U2, U)
        and np.array_equal(V2, V)
        and np.array_equal(bu2, bu)
        and np.array_equal(bi2, bi)
    )
    assert p.loss(U, V) == pytest.approx(p.loss(*p.augment(U, V)))


def test_biased_model_predict_clip_and_heldout_rmse() -> None:
    p = biased_problem()
    Uw, Vw = p.init_factors(rng=1, scale=None)
    assert np.all(Uw[:, 3] == 0) and np.all(Uw[:, 4] == 1) and np.all(Vw[:, 3] == 1)
    assert 0 < p.default_init_scale() < 1
    r = p.ratings
    pred = p.predict(Uw * 40, Vw, r.rows, r.cols)  # large factors: clipping matters
    raw = p.offset + np.einsum("ij,ij->i", (Uw * 40)[r.rows], Vw[r.cols])  # biases are zero
    assert pred.min() >= 2.0 and pred.max() <= 4.0 and (raw < 2).any() | (raw > 4).any()
    held = p.rmse(Uw * 40, Vw, r)  # held-out path: clipped
    assert held == pytest.approx(float(np.sqrt(np.mean((r.values - pred) ** 2))), rel=1e-12)
    assert p.rmse(Uw * 40, Vw) > held  # the training RMSE is unclipped
    with pytest.raises(InvalidParameterError, match="clip"):
        MatrixFactorizationProblem(r, 2, clip=(3.0, 1.0))
    with pytest.raises(InvalidParameterError, match="no biases"):
        MatrixFactorizationProblem(r, 2).augment(np.zeros((12, 2)), np.zeros((9, 2)), np.zeros(12))


def test_als_lambda_scale() -> None:
    r = make_low_rank_ratings(12, 9, 2, 0.6, rng=3)
    p = MatrixFactorizationProblem.from_als_lambda(r, 2, 6.0, lam_bias=3.0, bias=True)
    assert p.l2 == pytest.approx(6.0 / r.n_ratings) and p.l2_bias == pytest.approx(3.0 / r.n_ratings)
    U, V = p.init_factors(rng=0)
    als = 0.5 * p.sse(U, V) + 0.5 * (6.0 * float((U[:, :2] ** 2).sum() + (V[:, :2] ** 2).sum()))
    assert p.loss(U, V) * r.n_ratings == pytest.approx(als)  # biases are zero at the start


# ---------------------------------------------------------------- spectral start (issue 17)
def test_spectral_factors_recover_a_low_rank_matrix() -> None:
    # full observation, no noise, no ridge: the top-rank subspace reproduces the matrix
    r = make_low_rank_ratings(60, 40, 3, 1.0, rng=5, noise_std=0.0)
    p = MatrixFactorizationProblem(r, 3)
    U, V = p.spectral_factors(rng=0)
    assert U.shape == (60, 3) and V.shape == (40, 3)
    rmse = p.rmse(U, V)
    assert rmse < 1e-6 * float(np.std(r.values)) + 1e-9
    # the ridge soft-thresholds the singular values: a huge ridge gives zero factors
    big = MatrixFactorizationProblem(r, 3, l2=1e6)
    Ub, Vb = big.spectral_factors(rng=0)
    assert not Ub.any() and not Vb.any()


def test_spectral_start_is_seeded_and_beats_a_random_start() -> None:
    r = make_low_rank_ratings(80, 60, 2, 0.3, rng=2, noise_std=0.1)
    p = MatrixFactorizationProblem(r, 2, bias=True)
    a = p.init_factors(rng=1, scale="spectral")
    b = p.init_factors(rng=1, scale="spectral")
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
    assert a[0].shape == (80, 4)  # working factors, zero biases
    rand = p.init_factors(rng=1, scale=None)
    assert p.rmse(*a) < 0.9 * p.rmse(*rand)  # 0.83 x here; zero factors would give ~1 x
    with pytest.raises(InvalidParameterError, match="spectral"):
        p.init_factors(rng=1, scale="svd")  # type: ignore[arg-type]
