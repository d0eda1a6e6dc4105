"""DAWA (Li, Hay, Miklau, Wang 2014): privacy accounting, GreedyH, utility, audit."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

from dpopt.accounting import Budget, LaplaceEvent, make_accountant
from dpopt.audit import audit
from dpopt.exceptions import BudgetExceededError, InvalidParameterError
from dpopt.linear_queries import workloads
from dpopt.linear_queries.dawa import DawaResult, dawa

# the module (``dpopt.linear_queries.dawa`` the attribute is the function)
dawa_mod = importlib.import_module("dpopt.linear_queries.dawa")

N = 256
# a few large uniform blocks (block lengths deliberately not powers of two)
BLOCKY = np.repeat([50.0, 10.0, 80.0, 0.0, 30.0], [40, 70, 26, 60, 60])


def test_privacy_spent_equals_epsilon_and_result_shape() -> None:
    W = workloads.prefix(N)
    res = dawa(W, BLOCKY, epsilon=0.7, rng=1)
    assert isinstance(res, DawaResult)
    assert res.privacy.epsilon == pytest.approx(0.7, rel=1e-12)
    assert res.privacy.epsilon <= 0.7 * (1 + 1e-12)
    assert res.privacy.delta == 0.0 and res.privacy.n_events == 2
    assert res.answers.shape == (N,) and res.estimate.shape == (N,)
    assert res.partition[0] == 0 and res.partition[-1] == N and np.all(np.diff(res.partition) > 0)

    acct = make_accountant("basic", budget=Budget(2.0))
    dawa(W, BLOCKY, epsilon=0.5, rng=2, ratio=0.4, accountant=acct)
    assert acct.epsilon() == pytest.approx(0.5)
    assert [e.label for e in acct.ledger] == ["dawa/partition", "dawa/measure"]
    eps = [e.event.pure_epsilon() for e in acct.ledger if isinstance(e.event, LaplaceEvent)]
    assert eps == pytest.approx([0.2, 0.3])


def test_beats_identity_laplace_on_piecewise_constant_data() -> None:
    W = workloads.prefix(N)
    truth = W.answer(BLOCKY)
    eps = 1.0
    err_dawa, err_id = [], []
    for seed in range(20):
        res = dawa(W, BLOCKY, epsilon=eps, rng=seed)
        err_dawa.append(np.mean((res.answers - truth) ** 2))
        noisy = BLOCKY + np.random.default_rng(10_000 + seed).laplace(0.0, 1.0 / eps, N)
        err_id.append(np.mean((W.answer(noisy) - truth) ** 2))
    # measured ≈ 54.5 vs ≈ 161 (2.9x; the old per-level weights gave ≈ 56); require a clear 2.5x,
    # and 4x below identity's expected prefix error (1/N) Σ_i 2(i + 1)/ε² = N + 1 = 257
    assert np.mean(err_dawa) * 2.5 < np.mean(err_id)
    assert np.mean(err_dawa) * 4 < (N + 1) / eps**2


def test_ranges_workload_and_branching() -> None:
    W = workloads.random_ranges(64, N, rng=3)
    res = dawa(W, BLOCKY, epsilon=1.0, rng=4, branching=4)
    assert res.answers.shape == (64,)
    assert np.all(np.isfinite(res.answers))


def test_refused_budget_leaves_accountant_unchanged_and_draws_nothing() -> None:
    W = workloads.prefix(16)
    x = np.arange(16.0)
    acct = make_accountant("basic", budget=Budget(1.0))
    acct.compose(LaplaceEvent(scale=1.0 / 0.8), label="earlier")
    gen = np.random.default_rng(5)
    state = gen.bit_generator.state
    with pytest.raises(BudgetExceededError):
        dawa(W, x, epsilon=0.5, rng=gen, accountant=acct)  # stage 1 alone (0.125) would fit
    assert len(acct.ledger) == 1 and acct.epsilon() == pytest.approx(0.8)
    assert gen.bit_generator.state == state


def test_same_seed_same_result() -> None:
    W = workloads.prefix(N)
    a = dawa(W, BLOCKY, epsilon=0.5, rng=7)
    b = dawa(W, BLOCKY, epsilon=0.5, rng=7)
    c = dawa(W, BLOCKY, epsilon=0.5, rng=8)
    np.testing.assert_array_equal(a.answers, b.answers)
    np.testing.assert_array_equal(a.partition, b.partition)
    assert not np.array_equal(a.answers, c.answers)


@pytest.mark.parametrize(
    ("hist", "match"),
    [
        (np.array([1.0, np.nan, 2.0, 3.0]), "NaN"),
        (np.array([1.0, -7.5, 2.0, 3.0]), "non-negative"),
        (np.array([1.0, 2.0, 3.0]), "length 4"),
        (np.ones((2, 2)), "1-d"),
    ],
)
def test_validation_never_echoes_data(hist: np.ndarray, match: str) -> None:
    with pytest.raises(InvalidParameterError, match=match) as info:
        dawa(workloads.prefix(4), hist, epsilon=1.0, rng=0)
    assert "7.5" not in str(info.value)


@pytest.mark.parametrize("kwargs", [{"epsilon": 0.0}, {"epsilon": np.inf}, {"ratio": 1.0}, {"ratio": 0.0}])
def test_bad_parameters(kwargs: dict[str, float]) -> None:
    args = {"epsilon": 1.0, **kwargs}
    with pytest.raises(InvalidParameterError):
        dawa(workloads.prefix(4), np.ones(4), rng=0, **args)  # type: ignore[arg-type]


def test_audit_finds_no_violation() -> None:
    W = workloads.prefix(4)
    d0 = np.array([3.0, 1.0, 0.0, 2.0])
    d1 = d0 + np.array([0.0, 1.0, 0.0, 0.0])  # one extra record

    def mech(data: np.ndarray, rng: np.random.Generator) -> float:
        # verify=False: skip the PLD cross-check of the ledger (pure Laplace events; speed only)
        acct = make_accountant("basic", budget=Budget(1.0), verify=False)
        return float(dawa(W, data, epsilon=1.0, rng=rng, accountant=acct).answers.sum())

    result = audit(mech, d0, d1, n_runs=2_000, rng=11)
    assert not result.refutes(1.0), str(result)
    assert result.epsilon_lower > 0.1, str(result)  # the audit has power (measured ≈ 0.45)


# ------------------------------------------------------------------------------- GreedyH, stage 2
def _random_partition(n: int, k: int, seed: int) -> np.ndarray:
    cuts = np.sort(np.random.default_rng(seed).choice(np.arange(1, n), size=k - 1, replace=False))
    return np.concatenate([[0], cuts, [n]]).astype(np.intp)


def _dense_error(A: np.ndarray, Vr: np.ndarray) -> float:
    """tr(V_r (AᵀA)⁺): expected total squared reduced-domain error under unit-variance noise."""
    return float(np.trace(Vr @ np.linalg.pinv(A.T @ A)))


@pytest.mark.parametrize(("k", "branching"), [(1, 2), (7, 2), (37, 3), (64, 4), (50, 5)])
def test_weighted_sensitivity_is_max_column_l1_norm(k: int, branching: int) -> None:
    tree = dawa_mod._tree(k, branching)
    rng = np.random.default_rng(k)
    for weights in (rng.random(tree.n_nodes) * 3.0, np.ones(tree.n_nodes)):
        dense = np.abs(tree.matrix(weights)).sum(axis=0)
        np.testing.assert_allclose(dawa_mod._column_l1(tree, weights), dense, rtol=1e-14)
        sens = dawa_mod._sensitivity(tree, weights)
        assert sens >= dense.max() and sens == pytest.approx(dense.max(), rel=1e-14)
    if k in (7, 37):  # unbalanced trees: the columns of the uniform hierarchy genuinely differ
        assert np.ptp(np.abs(tree.matrix()).sum(axis=0)) > 0


def test_stage2_scale_uses_exact_weighted_sensitivity(monkeypatch: pytest.MonkeyPatch) -> None:
    """With any weights (here unnormalized, column norms varying) the Laplace scale is Δ·L/ε₂."""
    tree_weights: list[np.ndarray] = []

    def fake(workload: object, partition: np.ndarray, tree: object) -> np.ndarray:
        w = 0.5 + np.arange(tree.n_nodes, dtype=np.float64) % 3  # type: ignore[attr-defined]
        tree_weights.append(w)
        return w

    monkeypatch.setattr(dawa_mod, "_stage2_weights", fake)
    for relation, delta in (("add_remove", 1.0), ("replace_one", 2.0)):
        acct = make_accountant("basic", budget=Budget(1.0), neighbouring=relation)
        res = dawa(workloads.prefix(N), BLOCKY, epsilon=1.0, rng=3, accountant=acct)
        k = res.partition.shape[0] - 1
        dense = dawa_mod._tree(k, 2).matrix(tree_weights[-1])
        L = np.abs(dense).sum(axis=0).max()
        event = acct.ledger[-1].event
        assert isinstance(event, LaplaceEvent)
        assert event.scale == pytest.approx(delta * L / 0.75, rel=1e-14) and event.scale >= delta * L / 0.75
        assert acct.epsilon() == pytest.approx(1.0)
        # reported weights are rescaled to sensitivity one
        assert np.abs(dawa_mod._tree(k, 2).matrix(res.node_weights)).sum(axis=0).max() == pytest.approx(1.0)


@pytest.mark.parametrize("branching", [2, 3])
def test_greedy_weights_have_unit_columns_and_exact_error(branching: int) -> None:
    W = workloads.random_ranges(80, 160, rng=5)
    part = _random_partition(160, 45, seed=6)
    Vr = dawa_mod._reduced_gram(W, part)
    tree = dawa_mod._tree(45, branching)
    w, err = dawa_mod._greedy_h(Vr, tree)
    np.testing.assert_allclose(dawa_mod._column_l1(tree, w), 1.0, rtol=1e-12)
    assert err == pytest.approx(_dense_error(tree.matrix(w), Vr), rel=1e-9)
    # V_r is Eᵀ V E with E spreading each bucket uniformly
    sizes = np.diff(part)
    E = np.zeros((160, 45))
    E[np.arange(160), np.repeat(np.arange(45), sizes)] = 1.0 / np.repeat(sizes, sizes)
    np.testing.assert_allclose(Vr, E.T @ W.gram() @ E, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(
    ("workload", "n", "k", "margin"),
    [("prefix", 128, 128, 0.8), ("prefix", 200, 60, 0.7), ("ranges", 256, 90, 0.4), ("ranges", 64, 64, 1.0)],
)
def test_greedy_error_at_most_uniform_hierarchy(workload: str, n: int, k: int, margin: float) -> None:
    W = workloads.prefix(n) if workload == "prefix" else workloads.random_ranges(n // 2, n, rng=k)
    part = np.arange(n + 1, dtype=np.intp) if k == n else _random_partition(n, k, seed=n + k)
    Vr = dawa_mod._reduced_gram(W, part)
    tree = dawa_mod._tree(k, 2)
    w, err = dawa_mod._greedy_h(Vr, tree)
    H = tree.matrix()
    uniform = _dense_error(H / np.abs(H).sum(axis=0).max(), Vr)  # same sensitivity (one)
    greedy = _dense_error(tree.matrix(w), Vr)
    assert greedy == pytest.approx(err, rel=1e-9)
    # measured ratios greedy/uniform: 0.73, 0.59, 0.29, 0.30 (the last case only checks <=)
    assert greedy <= margin * uniform * (1 + 1e-12)


@pytest.mark.parametrize("kind", ["greedy", "random"])
def test_tree_least_squares_matches_dense(kind: str) -> None:
    k = 53
    tree = dawa_mod._tree(k, 3)
    rng = np.random.default_rng(9)
    if kind == "greedy":  # includes merged (indistinguishable) nodes: rank-deficient, minimum norm
        W = workloads.random_ranges(12, 120, rng=10)
        w, _ = dawa_mod._greedy_h(dawa_mod._reduced_gram(W, _random_partition(120, k, 11)), tree)
        assert np.count_nonzero(w) < tree.n_nodes
    else:
        w = rng.random(tree.n_nodes) + 0.05
    solver = dawa_mod._Solver.build(tree, w)
    A = tree.matrix(w)[w > 0]
    y = rng.poisson(30, k).astype(np.float64)
    np.testing.assert_allclose(solver.measure(y), A @ y, rtol=1e-13)
    z = A @ y + rng.laplace(0.0, 5.0, A.shape[0])
    np.testing.assert_allclose(solver.transpose(z), A.T @ z, rtol=1e-12, atol=1e-12)
    expected, *_ = np.linalg.lstsq(A, z, rcond=None)
    np.testing.assert_allclose(solver.solve(solver.transpose(z)), expected, rtol=1e-9, atol=1e-9)
    Vr = np.cov(rng.random((k, 3 * k))) + np.eye(k)  # any PSD matrix
    assert solver.error(Vr) == pytest.approx(_dense_error(A, Vr), rel=1e-9)


def test_unidentified_bucket_is_refused() -> None:
    tree = dawa_mod._tree(4, 2)  # nodes: [0,4) [0,2) [2,4) [0,1) [1,2) [2,3) [3,4)
    with pytest.raises(InvalidParameterError, match="identify"):
        dawa_mod._Solver.build(tree, np.array([1.0, 1.0, 0.0, 0.0, 0.0, 1.0, 0.0]))


def test_total_workload_measures_only_the_root() -> None:
    """No query separates any two buckets: one measurement of the total, an unbiased answer."""
    W = workloads.total(N)
    res = dawa(W, BLOCKY, epsilon=1.0, rng=12)
    assert np.count_nonzero(res.node_weights) == 1 and res.node_weights[0] == pytest.approx(1.0)
    errs = [
        dawa(W, BLOCKY, epsilon=1.0, rng=s, accountant=make_accountant("basic", verify=False)).answers[0]
        - BLOCKY.sum()
        for s in range(200)
    ]
    assert abs(np.mean(errs)) < 0.4  # Laplace(4/3) noise: sd ≈ 1.9, mean of 200 ≈ 0.13 sd


def test_many_buckets_no_cap() -> None:
    """A spiky histogram at large ε gives hundreds of buckets; GreedyH still runs (no 256 cap)."""
    n = 1024
    W = workloads.random_ranges(512, n, rng=13)
    x = np.random.default_rng(14).poisson(5.0, n) * 100.0
    res = dawa(W, x, epsilon=50.0, rng=15)
    k = res.partition.shape[0] - 1
    assert k > 300
    assert res.node_intervals.shape == (res.node_weights.shape[0], 2)
    assert np.count_nonzero(res.node_weights) < res.node_weights.shape[0]  # some nodes dropped
    assert np.mean((res.answers - W.answer(x)) ** 2) < np.mean(W.answer(x) ** 2) * 1e-3


def test_stage2_keeps_the_better_of_greedy_and_uniform() -> None:
    """GreedyH is local: where the uniform hierarchy is better (measured ≈ 14% here) it is kept."""
    for W, n, greedy_wins in (
        (workloads.random_ranges(1024, 2048, rng=123), 2048, False),
        (workloads.prefix(128), 128, True),
    ):
        part = np.arange(n + 1, dtype=np.intp)
        tree = dawa_mod._tree(n, 2)
        Vr = dawa_mod._reduced_gram(W, part)
        _, err_g = dawa_mod._greedy_h(Vr, tree)
        chosen = dawa_mod._stage2_weights(W, part, tree)
        err_c = dawa_mod._Solver.build(tree, chosen).error(Vr) * dawa_mod._sensitivity(tree, chosen) ** 2
        u = np.ones(tree.n_nodes)
        err_u = dawa_mod._Solver.build(tree, u).error(Vr) * dawa_mod._sensitivity(tree, u) ** 2
        assert err_c == pytest.approx(min(err_g, err_u), rel=1e-9)
        assert bool(err_g < err_u) is greedy_wins
