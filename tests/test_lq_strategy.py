"""Strategy optimization: derivatives, CG, certificates, invariances, COA paper variant, baselines."""

from __future__ import annotations

import itertools
import warnings

import numpy as np
import pytest

from dpopt.exceptions import InvalidParameterError
from dpopt.linear_queries import COAParams, StrategyResult, evaluate_strategy, optimize_strategy
from dpopt.linear_queries import workloads as wl
from dpopt.linear_queries.baselines import (
    BASELINES,
    baseline,
    gm_direct_objective,
    haar_matrix,
    hierarchical_matrix,
)
from dpopt.linear_queries.strategy import (
    coa_gradient,
    coa_hessian_vector,
    coa_objective,
    dual_lower_bound,
    modified_cg,
    strategy_error,
    svd_lower_bound,
)


def _random_problem(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    W = rng.normal(size=(2 * n, n))
    V = W.T @ W
    B = rng.normal(size=(n, n))
    X = B @ B.T / n + np.eye(n)
    d = np.sqrt(np.diag(X))
    return V, X / np.outer(d, d)


def _sym_direction(n: int, seed: int) -> np.ndarray:
    D = np.random.default_rng(seed).normal(size=(n, n))
    return (D + D.T) / 2


def test_gradient_and_hessian_match_finite_differences():
    V, X = _random_problem(6, 0)
    D = _sym_direction(6, 1)
    h = 1e-6
    fd = (coa_objective(X + h * D, V) - coa_objective(X - h * D, V)) / (2 * h)
    assert np.sum(coa_gradient(X, V) * D) == pytest.approx(fd, rel=1e-6)
    fd_h = (coa_gradient(X + h * D, V) - coa_gradient(X - h * D, V)) / (2 * h)
    np.testing.assert_allclose(coa_hessian_vector(X, V, D), fd_h, rtol=1e-5, atol=1e-6)


def test_modified_cg_solves_reduced_newton_system():
    n = 5
    V, X = _random_problem(n, 2)
    Z = np.linalg.inv(X)
    G = -Z @ V @ Z
    D, passes = modified_cg(Z, G, max_steps=200, tol_abs=1e-24)
    iu = np.triu_indices(n, 1)
    basis = []
    for i, j in zip(*iu, strict=True):
        E = np.zeros((n, n))
        E[i, j] = E[j, i] = 1.0
        basis.append(E)
    H = np.array([[np.sum(Ei * coa_hessian_vector(X, V, Ej)) for Ej in basis] for Ei in basis])
    g = np.array([np.sum(Ei * G) for Ei in basis])
    coef = np.linalg.solve(H, -g)
    D_ref = sum(c * E for c, E in zip(coef, basis, strict=True))
    np.testing.assert_allclose(D, D_ref, rtol=1e-7, atol=1e-8)
    assert np.all(np.diag(D) == 0)
    assert passes >= 1


@pytest.mark.parametrize(
    "make",
    [
        lambda: wl.random_ranges(30, 12, rng=0),
        lambda: wl.random_bernoulli(20, 10, rng=1),
        lambda: wl.random_marginals(40, 16, rng=2),  # rank deficient
        lambda: wl.random_related(20, 12, 4, rng=3),  # rank deficient
        lambda: wl.random_related(32, 32, 3, rng=np.random.default_rng(0)),  # inactive column constraints
        lambda: wl.prefix(16),
        lambda: wl.all_range(16),
    ],
    ids=["ranges", "bernoulli", "marginals", "related", "related-rank3", "prefix", "all_range"],
)
def test_certified_gap_small_random_workloads(make):
    W = make()
    res = optimize_strategy(W, tol=1e-7, max_iter=3000)
    assert res.status == "converged"
    assert res.gap <= 1e-6
    assert res.svd_bound <= res.lower_bound * (1 + 1e-12) <= res.objective * (1 + 1e-9)
    assert res.bias < 1e-10
    A = res.strategy
    assert np.max(np.linalg.norm(A, axis=0)) == pytest.approx(1.0, abs=1e-9)
    # the certificate bounds every other strategy, too
    for name in ("identity", "hierarchical", "eigen"):
        assert baseline(name, W).objective >= res.lower_bound * (1 - 1e-9)
    obj, _ = strategy_error(A, W.gram())
    assert obj == pytest.approx(res.objective, rel=1e-9)


def test_closed_form_optima():
    assert optimize_strategy(wl.identity(8)).objective == pytest.approx(8, rel=1e-6)
    assert optimize_strategy(wl.total(8)).objective == pytest.approx(1, rel=1e-6)


def test_lower_bounds_consistent():
    W = wl.random_ranges(25, 10, rng=4)
    V = W.gram()
    svd = svd_lower_bound(V)
    assert dual_lower_bound(V, np.ones(10)) == pytest.approx(svd)
    res = optimize_strategy(W, tol=1e-8, max_iter=2000)
    for seed in range(3):
        y = np.random.default_rng(seed).uniform(0.1, 2, size=10)
        assert dual_lower_bound(V, y) <= res.objective * (1 + 1e-9)


def test_scaling_and_permutation_invariance():
    W = wl.random_bernoulli(20, 8, rng=5)
    D = W.matrix()
    base = optimize_strategy(W, tol=1e-9, max_iter=2000)
    scaled = optimize_strategy(wl.from_matrix(3.0 * D), tol=1e-9, max_iter=2000)
    assert scaled.objective == pytest.approx(9.0 * base.objective, rel=1e-6)
    X = base.strategy.T @ base.strategy
    np.testing.assert_allclose(scaled.strategy.T @ scaled.strategy, X, atol=1e-4)
    perm = np.random.default_rng(0).permutation(8)
    permuted = optimize_strategy(wl.from_matrix(D[:, perm]), tol=1e-9, max_iter=2000)
    assert permuted.objective == pytest.approx(base.objective, rel=1e-6)
    Xp = permuted.strategy.T @ permuted.strategy
    np.testing.assert_allclose(Xp, X[np.ix_(perm, perm)], atol=1e-4)


def test_zero_columns_left_unmeasured():
    D = np.array([[1.0, 0.0, 1.0], [0.0, 0.0, 1.0], [1.0, 0.0, 0.0]])
    W = wl.from_matrix(D, allow_zero_columns=True)
    res = optimize_strategy(W, tol=1e-8)
    assert np.allclose(res.strategy[:, 1], 0)
    ref = optimize_strategy(wl.from_matrix(D[:, [0, 2]]), tol=1e-8)
    assert res.objective == pytest.approx(ref.objective, rel=1e-6)


def test_paper_variant_runs_and_is_monotone():
    W = wl.random_ranges(64, 24, rng=6)
    res = optimize_strategy(W, method="paper")
    assert res.status in ("converged", "max_iter", "failed")
    assert res.n_iter <= 30
    F = [h["regularized_objective"] for h in res.history]
    assert all(b <= a * (1 + 1e-12) for a, b in itertools.pairwise(F))
    A = res.strategy
    np.testing.assert_allclose(np.linalg.norm(A, axis=0), 1.0, atol=1e-8)
    assert res.objective >= res.lower_bound * (1 - 1e-9)
    assert res.objective <= np.trace(W.gram())  # never worse than the start X0 = I
    best = optimize_strategy(W, tol=1e-6)
    assert best.objective <= res.objective * (1 + 1e-9)
    assert COAParams.matlab().beta == 0.5
    homo = optimize_strategy(
        wl.random_marginals(64, 16, rng=1), method="paper", params=COAParams(homotopy=True)
    )
    assert homo.objective >= homo.lower_bound * (1 - 1e-9)


def test_newton_variant_certifies():
    res = optimize_strategy(wl.prefix(16), method="newton", tol=1e-5, max_iter=60)
    assert res.gap <= 1e-5


def test_line_search_failure_keeps_start():
    W = wl.prefix(12)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = optimize_strategy(
            W, method="paper", params=COAParams(max_line_search=1, beta=0.1, sigma=0.4999)
        )
    assert res.objective <= np.trace(W.gram()) * (1 + 1e-12)
    assert res.status in ("failed", "converged", "max_iter")


def test_save_load_roundtrip(tmp_path):
    W = wl.prefix(10)
    res = optimize_strategy(W)
    path = res.save(tmp_path / "s")
    back = StrategyResult.load(path, workload=W)
    np.testing.assert_array_equal(back.strategy, res.strategy)
    assert back.objective == res.objective and back.status == res.status
    with pytest.raises(InvalidParameterError, match="fingerprint"):
        StrategyResult.load(path, workload=wl.prefix(11))


def test_refuses_when_memory_too_small():
    with pytest.raises(InvalidParameterError, match="GiB"):
        optimize_strategy(wl.prefix(64), max_memory=1000)


def test_bad_arguments():
    with pytest.raises(InvalidParameterError):
        optimize_strategy(wl.prefix(4), method="lbfgs")  # type: ignore[arg-type]
    with pytest.raises(InvalidParameterError):
        optimize_strategy(np.array([[1.0, np.nan]]))
    with pytest.raises(InvalidParameterError):
        evaluate_strategy(wl.prefix(4), np.eye(3))


def test_baselines_closed_forms():
    n = 16
    W = wl.random_ranges(40, n, rng=9)
    ident = baseline("identity", W)
    assert ident.objective == pytest.approx(W.frobenius_norm_sq)
    depth = np.log2(n)
    for A in (haar_matrix(n), hierarchical_matrix(n)):
        np.testing.assert_allclose(np.linalg.norm(A, axis=0), np.sqrt(1 + depth))
    assert hierarchical_matrix(n).shape == (2 * n - 1, n)
    gm = baseline("gm", W)
    assert gm.objective == pytest.approx(np.linalg.matrix_rank(W.matrix()) * W.l2_sensitivity**2, rel=1e-8)
    assert gm_direct_objective(W) == pytest.approx(40 * W.l2_sensitivity**2)
    for name in BASELINES:
        assert baseline(name, W).bias < 1e-8
    best = optimize_strategy(W, tol=1e-6)
    lrm = baseline("lrm", W)
    assert best.lower_bound * (1 - 1e-9) <= lrm.objective <= 1.05 * best.objective
    esm = baseline("esm", W)
    assert best.lower_bound * (1 - 1e-9) <= esm.objective <= 1.1 * best.objective
    with pytest.raises(InvalidParameterError):
        baseline("dawa", W)


def test_kronecker_solved_per_factor_and_certified(tmp_path):
    K = wl.kronecker(wl.prefix(6), wl.random_ranges(10, 5, rng=1))
    res = optimize_strategy(K, tol=1e-7, max_iter=3000)
    assert res.status == "converged" and res.gap <= 1e-6
    assert len(res.factors) == 2 and res.strategy.shape == (30, 30)
    obj, bias = strategy_error(res.strategy, K.gram())
    assert obj == pytest.approx(res.objective, rel=1e-9) and bias < 1e-10
    dense = optimize_strategy(wl.from_matrix(K.matrix()), tol=1e-7, max_iter=3000)
    assert dense.objective == pytest.approx(res.objective, rel=2e-6)
    back = StrategyResult.load(res.save(tmp_path / "k.npz"), workload=K)
    assert len(back.factors) == 2
    np.testing.assert_array_equal(back.factors[1], res.factors[1])
    big = optimize_strategy(wl.kronecker(wl.prefix(64), wl.all_range(32), wl.prefix(16)))
    assert big.converged and big.strategy.shape == (0, 64 * 32 * 16)


def test_cache_dir_reuses_strategies(tmp_path):
    W = wl.random_ranges(20, 10, rng=2)
    first = optimize_strategy(W, cache_dir=tmp_path)
    assert len(list(tmp_path.glob("*.npz"))) == 1
    again = optimize_strategy(wl.random_ranges(20, 10, rng=2), cache_dir=tmp_path)
    np.testing.assert_array_equal(again.strategy, first.strategy)
    assert again.cpu_seconds == first.cpu_seconds  # loaded, not recomputed


def test_rank_deficient_needs_ridge_in_newton_methods():
    W = wl.random_marginals(40, 16, rng=0)
    for method in ("paper", "newton"):
        with pytest.raises(InvalidParameterError, match="rank deficient"):
            optimize_strategy(W, method=method, params=COAParams(theta=0.0))
    assert optimize_strategy(W).converged  # the dual method needs no ridge


def test_marginals_on_multidimensional_domain():
    M = wl.marginals((4, 3, 5), 2)
    res = optimize_strategy(M, tol=1e-7, max_iter=3000)
    assert res.converged and res.gap <= 1e-6 and res.bias < 1e-10
    assert np.linalg.matrix_rank(res.strategy) < 60  # measures only the marginals' row space
    assert res.objective < baseline("identity", M).objective


def test_callback_and_progress():
    seen = []

    def stop_at_two(info):
        seen.append(info["iteration"])
        return info["iteration"] >= 2

    res = optimize_strategy(wl.random_ranges(40, 20, rng=0), tol=0.0, callback=stop_at_two, warn=False)
    assert res.status == "stopped" and res.nit == 2 and seen == [1, 2]


@pytest.mark.parametrize("method", ["dual", "paper", "newton"])
def test_callback_sees_each_iterate_strategy(method):
    W = wl.random_ranges(30, 12, rng=3)
    V = W.gram()
    got = []
    res = optimize_strategy(
        W,
        method=method,
        max_iter=4,
        warn=False,
        callback=lambda info: got.append((info["objective"], info["strategy"])),
    )
    assert len(got) == len(res.history) >= 1
    for objective, A in got:
        assert A.shape[1] == 12 and np.max(np.sum(A**2, axis=0)) <= 1 + 1e-12
        # the iterate's exact error equals the objective the history reports for it
        assert strategy_error(A, V)[0] == pytest.approx(objective, rel=1e-6)
    assert "strategy" not in res.history[-1]  # iterates are not kept in the result
    assert optimize_strategy(wl.prefix(8), progress=True).converged


@pytest.mark.parametrize(("shape", "k"), [((4, 3, 5), 2), ((3, 2, 4, 2), 1), ((3, 2, 4, 2), 3)])
def test_marginals_closed_form_matches_dense_optimum(shape, k, tmp_path):
    M = wl.marginals(shape, k)
    closed = optimize_strategy(M)
    assert closed.gap == 0.0 and closed.residual_terms
    from dpopt.linear_queries.union import plan_from_result

    A = plan_from_result(closed).dense_matrix()  # the implicit strategy, formed for the check
    obj, bias = strategy_error(A, M.gram())
    assert obj == pytest.approx(closed.objective, rel=1e-10) and bias < 1e-12
    np.testing.assert_allclose(np.linalg.norm(A, axis=0), 1.0, atol=1e-12)
    dense = optimize_strategy(wl.Union(M.parts), tol=1e-9, max_iter=3000)
    assert dense.objective == pytest.approx(closed.objective, rel=1e-7)
    assert dense.lower_bound <= closed.objective  # certified: no tolerance needed (issue 12 §4)
    back = StrategyResult.load(closed.save(tmp_path / "m"), workload=M)
    assert back.residual_terms == closed.residual_terms and back.domain_shape == closed.domain_shape


def test_marginals_far_beyond_dense_domains():
    M = wl.marginals((16, 16, 16, 16), 2)  # 65536 cells: no dense n x n matrix anywhere
    res = optimize_strategy(M)
    assert res.converged and res.gap == 0.0 and res.strategy.shape == (0, 65536)
    with pytest.raises(InvalidParameterError, match="residual basis"):
        M.gram()


@pytest.mark.parametrize(("tilt", "outcome"), [(0.0, "exact"), (1e-3, "warns"), (0.1, "refused")])
def test_baseline_with_an_approximate_row_space(monkeypatch, tilt, outcome):
    from dpopt.exceptions import ConvergenceWarning
    from dpopt.linear_queries import baselines as bl

    W = wl.random_related(40, 20, 5, rng=4)
    _, _, Vt = np.linalg.svd(W.matrix())
    B = Vt[:5] + tilt * Vt[5:10]  # row space of W tilted towards its null space
    monkeypatch.setattr(bl, "low_rank_mechanism", lambda workload: B)
    if outcome == "refused":
        with pytest.raises(InvalidParameterError, match="row space"):
            baseline("lrm", W)
        return
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = baseline("lrm", W)
    assert res.bias == pytest.approx(0.0 if tilt == 0 else tilt**2 / (1 + tilt**2), rel=0.5, abs=1e-12)
    assert any(issubclass(w.category, ConvergenceWarning) for w in caught) == (outcome == "warns")


@pytest.mark.parametrize(
    ("shape", "k", "rank"),
    [((2, 2, 2, 2, 2), 2, 16), ((2,) * 8, 2, 37), ((4, 4, 4, 4), 2, 67), ((2, 2, 2, 2, 2), 3, 26)],
)
def test_certified_bound_never_exceeds_exact_optimum_on_singular_workloads(shape, k, rank):
    # issue 12 §4: on dense 2-way marginals the clipped-eigenvalue SVD bound exceeded the exact
    # (closed-form) optimum by 1.7e-8 (rank 16 of 32, negative gap), 8.8e-8 ((2,)*8, n = 256) and
    # 3.5e-8 ((4,)*4, n = 256): rounding-level null eigenvalues contributed sqrt(noise) each.
    # (rank 26 of 32 takes the dual method's full eigendecomposition path, the others its SVD path)
    M = wl.marginals(shape, k)
    exact = optimize_strategy(M).objective  # the optimum in closed form (residual basis)
    dense = wl.from_matrix(M.matrix())
    V = dense.gram()
    assert np.linalg.matrix_rank(V) == rank < V.shape[0]
    assert svd_lower_bound(V) <= exact
    assert dual_lower_bound(V, np.ones(V.shape[0])) <= exact
    res = optimize_strategy(dense)
    assert res.converged and 0.0 <= res.gap <= 1e-6
    assert max(res.lower_bound, res.svd_bound, res.dual_bound) <= exact <= res.objective * (1 + 1e-12)
    assert "lower_bound_lowered_by" not in res.params  # the bound is rigorous, not clamped
    assert all(0.0 <= h["gap"] and h["lower_bound"] <= exact for h in res.history)  # per iteration too
    # the bound stays tight: rigour costs only rounding-level slack
    assert res.lower_bound >= exact * (1 - 1e-10)
    # the old certificate (square roots of eigenvalues clipped at 0) does exceed the optimum here
    w = np.clip(np.linalg.eigvalsh(V), 0.0, None)
    assert np.sqrt(w).sum() ** 2 / V.shape[0] > exact


def test_certified_bound_handles_rounding_noise_in_null_space():
    # a rank-3 Gram matrix with null eigenvalues perturbed at rounding level in both directions
    rng = np.random.default_rng(12)
    W = rng.standard_normal((3, 40))
    V = W.T @ W
    exact_root = np.linalg.svd(W, compute_uv=False).sum()
    noise = rng.standard_normal((40, 40)) * 1e-15 * np.abs(V).max()
    Vn = V + (noise + noise.T) / 2
    assert svd_lower_bound(Vn) <= exact_root**2 / 40 * (1 + 1e-12)
    clipped = np.sqrt(np.clip(np.linalg.eigvalsh(Vn), 0, None)).sum() ** 2 / 40
    assert clipped > exact_root**2 / 40 * (1 + 1e-8)  # what the old bound reported


def test_evaluate_strategy_certificate_on_an_optimal_singular_strategy():
    # the closed-form optimum of 2-way marginals, evaluated against the dense workload
    M = wl.marginals((2, 2, 2, 2, 2), 2)
    closed = optimize_strategy(M)
    from dpopt.linear_queries.union import plan_from_result

    res = evaluate_strategy(wl.from_matrix(M.matrix()), plan_from_result(closed).dense_matrix())
    assert res.lower_bound <= closed.objective and 0.0 <= res.gap <= 1e-10


@pytest.mark.parametrize("make", [wl.prefix, wl.all_range])
def test_tridiagonal_inverse_path_matches_the_dense_path(make):
    W = make(300)  # above the small-n cut-off: the O(n²) structure-aware evaluator
    fast = optimize_strategy(W)
    assert fast.params.get("structure", "").startswith("tridiagonal")
    dense = optimize_strategy(wl.from_matrix(W.matrix()))  # same Gram matrix, no structure
    assert "structure" not in dense.params
    assert fast.converged and fast.gap <= 1e-4
    assert fast.objective == pytest.approx(dense.objective, rel=2e-4)
    assert fast.lower_bound <= dense.objective and dense.lower_bound <= fast.objective
    obj, bias = strategy_error(fast.strategy, W.gram())
    assert obj == pytest.approx(fast.objective, rel=1e-8) and bias < 1e-10
    V = W.gram()
    from dpopt.linear_queries.strategy import _tridiagonal_inverse

    d, e = _tridiagonal_inverse(W, 300)
    T = np.diag(d) + np.diag(e, 1) + np.diag(e, -1)
    np.testing.assert_allclose(T @ V, np.eye(300), atol=1e-8)


@pytest.mark.parametrize("make", [wl.prefix, wl.all_range])
def test_tridiagonal_certificate_is_below_the_exact_bound_and_tight(make):
    from dpopt.linear_queries.strategy import _tridiagonal_inverse, tridiagonal_dual_bound

    n = 300
    W = make(n)
    V = W.gram()
    d, e = _tridiagonal_inverse(W, n)
    rng = np.random.default_rng(3)
    for y in (np.ones(n), rng.uniform(0.05, 20.0, n)):
        s = np.sqrt(y)
        lam = np.linalg.eigvalsh(s[:, None] * V * s[None, :])
        exact = np.sum(np.sqrt(np.clip(lam, 0.0, None))) ** 2 / y.sum()
        cert = tridiagonal_dual_bound(d, e, y)
        assert cert <= exact and (exact - cert) / exact < 1e-7  # certified, with room for a 1e-7 gap
        # a planted bug (the certificate of a slightly larger workload) is refuted
        assert tridiagonal_dual_bound(d * (1 - 1e-6), e * (1 - 1e-6), y) > exact
    with pytest.raises(InvalidParameterError):
        tridiagonal_dual_bound(d, e, np.zeros(n))


@pytest.mark.parametrize("make", [wl.prefix, wl.all_range])
def test_tol_1e7_certifies_a_1e7_gap_on_the_structured_path(make):
    W = make(300)
    tight = optimize_strategy(W, tol=1e-7)
    assert tight.params.get("structure", "").startswith("tridiagonal")
    assert tight.converged and 0.0 <= tight.gap <= 1e-7
    obj, _ = strategy_error(tight.strategy, W.gram())
    assert obj == pytest.approx(tight.objective, rel=1e-9)
    assert tight.lower_bound <= obj
    default = optimize_strategy(W)
    assert tight.objective <= default.objective * (1 + 1e-12)


def test_identical_columns_are_solved_once_and_certified():
    # 12 random ranges on 200 cells: at most 25 distinct columns (the cells between endpoints)
    W = wl.random_ranges(12, 200, rng=4)
    from dpopt.linear_queries.strategy import _column_classes

    V = W.gram()
    support = np.flatnonzero(np.diag(V) > 0)
    reps, classes = _column_classes(V, support)
    M = W.matrix()
    np.testing.assert_array_equal(M[:, support], M[:, reps][:, classes])  # same columns, exactly
    assert reps.size < 30
    res = optimize_strategy(W)
    assert res.params["structure"] == f"{reps.size} classes of identical columns"
    assert res.converged and 0.0 <= res.gap <= 1e-4 and res.strategy.shape[1] == 200
    obj, bias = strategy_error(res.strategy, V)  # independent evaluation on the full domain
    assert obj == pytest.approx(res.objective, rel=1e-8) and bias < 1e-10
    # the certificate holds for the full problem: no full-domain strategy beats it
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        newton = optimize_strategy(W, method="newton", tol=1e-6)  # dense, no reduction
    assert "structure" not in newton.params
    assert res.lower_bound <= newton.objective and newton.lower_bound <= res.objective
    # rows that differ in one entry are not merged (a planted near-duplicate is refuted)
    lo, hi = np.array([0, 0]), np.array([4, 5])
    near = wl.ranges(lo, hi, 8)
    r2, c2 = _column_classes(near.gram(), np.flatnonzero(np.diag(near.gram()) > 0))
    assert r2.tolist() == [0, 5] and c2.tolist() == [0, 0, 0, 0, 0, 1]


@pytest.mark.slow
def test_structured_path_never_forms_the_gram_matrix():
    W = wl.prefix(2100)  # above _VERIFY_LIMIT: the tridiagonal path runs without V
    res = optimize_strategy(W)
    assert W._gram_cache is None
    assert res.converged and res.gap <= 1e-4 and res.strategy.shape == (2100, 2100)
    assert res.workload_fingerprint == wl.prefix(2100).fingerprint()
    # the block-wise fingerprint hashes exactly the bytes of the dense Gram matrix
    import hashlib

    h = hashlib.sha256(b"2100x2100")
    h.update(np.ascontiguousarray(W.gram()).tobytes())
    assert res.workload_fingerprint == h.hexdigest()


def test_factor_evaluator_matches_the_dense_one():
    from dpopt.linear_queries.strategy import _DualEvaluator

    F = wl.random_ranges(40, 120, rng=2).matrix()  # 40 rows, 120 cells: the m x m path
    V = F.T @ F
    lam, Q = np.linalg.eigh(V)
    w = np.clip(lam, 0.0, None)
    dense = _DualEvaluator(V, w, Q, low_rank=False)
    fact = _DualEvaluator(V, w, Q, low_rank=False, factor=F)
    assert fact.factor is not None and _DualEvaluator(V, w, Q, low_rank=False, factor=V).factor is None
    y = np.random.default_rng(3).uniform(1e-3, 10.0, 120)
    tr_d, diag_d = dense.evaluate(y)
    tr_f, diag_f = fact.evaluate(y)
    _, sig, Pt = np.linalg.svd(F * np.sqrt(y), full_matrices=False)  # reference: M = P diag(sig) Pᵀ
    assert tr_f == pytest.approx(sig.sum(), rel=1e-12)  # the dense one is within ~1e-7 (null space)
    assert tr_d == pytest.approx(sig.sum(), rel=1e-6) and tr_f != pytest.approx(
        sig.sum() * (1 + 1e-9), rel=1e-12
    )
    np.testing.assert_allclose(diag_f, np.einsum("ji,j,ji->i", Pt, sig, Pt), rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(diag_f, diag_d, rtol=1e-5, atol=1e-6)
    M = (Pt.T * sig) @ Pt
    X = M / np.sqrt(np.outer(y, y)) / np.max(np.diag(M) / y)  # the uniformly scaled candidate
    A_f = fact.strategy(y, "uniform")
    np.testing.assert_allclose(A_f.T @ A_f, X, atol=1e-12)
    A_d = dense.strategy(y, "uniform")
    np.testing.assert_allclose(A_d.T @ A_d, X, atol=1e-4)  # the dense one carries null-space noise
    # the padded candidate (uniform + one measurement of every cell with unused norm): unit
    # columns, full rank, its objective exact and never above the uniform one
    d = diag_f / y
    fact._calls = 3  # evaluated every 4th call
    padded = fact.normalized_objective(d)
    A_p = fact.strategy(y, "normalized")
    np.testing.assert_allclose(np.linalg.norm(A_p, axis=0), 1.0, rtol=1e-12)
    assert padded == pytest.approx(strategy_error(A_p, V)[0], rel=1e-9)
    assert padded <= tr_f * d.max() and padded != pytest.approx(tr_f * d.max(), rel=1e-3)
    res = optimize_strategy(wl.random_ranges(12, 200, rng=4))
    assert res.params["iteration"] == "12 x 12 eigenproblem of W Y Wᵀ" and res.converged


def test_factor_certificate_is_below_the_exact_bound_and_tight():
    from dpopt.linear_queries.strategy import factor_dual_bound

    rng = np.random.default_rng(5)
    F = wl.random_ranges(40, 120, rng=1).matrix()  # rank-deficient: 40 rows, 120 cells
    V = F.T @ F
    for y in (np.ones(120), rng.uniform(1e-6, 30.0, 120)):
        s = np.sqrt(y)
        exact = np.sum(np.linalg.svd(F * s, compute_uv=False)) ** 2 / y.sum()
        cert = factor_dual_bound(F, y)
        assert cert <= exact and (exact - cert) / exact < 1e-9
        assert cert >= dual_lower_bound(V, y) * (1 - 1e-12)  # never worse than the dense one here
        assert factor_dual_bound(F * (1 + 1e-7), y) > exact  # a planted (larger) workload is refuted
    with pytest.raises(InvalidParameterError):
        factor_dual_bound(F, np.zeros(120))


@pytest.mark.parametrize("make", [wl.prefix, wl.all_range])
def test_tridiagonal_certificate_relative_allowance(make):
    from dpopt.linear_queries.strategy import _gram_norm_bound, _tridiagonal_inverse, tridiagonal_dual_bound

    n = 400
    W = make(n)
    V = W.gram()
    norm = _gram_norm_bound(W, n)
    assert np.linalg.norm(V, 2) <= norm <= np.abs(V).sum(axis=1).max() * (1 + 1e-12)
    d, e = _tridiagonal_inverse(W, n)
    y = np.exp(np.random.default_rng(7).uniform(np.log(1e-5), np.log(1e2), n))  # badly scaled
    s = np.sqrt(y)
    exact = (
        np.sum(np.sqrt(np.clip(np.linalg.eigvalsh(s[:, None] * V * s[None, :]), 0.0, None))) ** 2 / y.sum()
    )
    absolute = tridiagonal_dual_bound(d, e, y)
    relative = tridiagonal_dual_bound(d, e, y, gram_norm=norm)
    assert absolute <= relative <= exact
    assert (exact - relative) / exact < 1e-8 < (exact - absolute) / exact  # the relative allowance is tighter
    # a planted bug (a slightly larger workload's certificate) is refuted
    assert tridiagonal_dual_bound(d * (1 - 1e-6), e * (1 - 1e-6), y, gram_norm=norm) > exact
