"""The public PP schedule (issue 14, item 6): spends exactly the budget, converges, averages rounds."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from dpopt.accounting import Budget
from dpopt.datasets import make_logistic
from dpopt.distributed.admm import PrivateADMM, public_pp_schedule
from dpopt.distributed.admm_privacy import pp_privacy_bound
from dpopt.distributed.topology import ring, split_rows
from dpopt.exceptions import InvalidParameterError


def _data(n_nodes: int = 4, rows: int = 1600, dim: int = 5):
    ds = make_logistic(rows, dim, rng=3)
    assert ds.y is not None
    x = ds.X / np.maximum(1.0, np.linalg.norm(ds.X, axis=1, keepdims=True))
    parts = split_rows(rows, n_nodes, how="dirichlet", rng=1, min_size=100)
    return [(x[p], ds.y[p]) for p in parts], x, ds.y


def test_schedule_spends_exactly_the_budget_on_every_node() -> None:
    v = np.array([1.0, 2.0, 3.0, 2.0])
    b = np.array([100.0, 400.0, 250.0, 1000.0])
    for eps, floor in ((0.5, 5.0), (5.0, 1.0)):
        s = public_pp_schedule(
            eps, degrees=v, sizes=b, loss_weight=10.0, l2_penalty=1e-2, min_noise_rate=floor
        )
        p = pp_privacy_bound(
            np.tile(s.penalty, (s.max_iter, 1)), np.full((s.max_iter, 4), s.noise_rate), v, b, 10.0
        )
        assert np.allclose(p[-1], eps / 1.01, rtol=1e-6) and np.all(p[-1] <= eps / 1.01)
        assert s.noise_rate >= floor and s.theta == s.penalty.min()
        # Thm 4.1's θ-condition holds for every node (ρ/N = Cλ)
        assert np.all(2 * 0.25 < (b / 10.0) * (10.0 * 1e-2 + 2 * s.theta * v))
        # every node's total progress is proportional to its size, whatever its degree
        assert np.allclose(s.progress / b, s.progress[0] / b[0])
    # a tiny node next to large ones: θ is raised to meet the θ-condition, and the bound stays <= ε
    b2 = np.array([20.0, 5000.0, 5000.0, 5000.0])
    s2 = public_pp_schedule(1.0, degrees=v, sizes=b2, loss_weight=10.0, l2_penalty=1e-3)
    assert np.all(2 * 0.25 < (b2 / 10.0) * (10.0 * 1e-3 + 2 * s2.theta * v))
    p2 = pp_privacy_bound(
        np.tile(s2.penalty, (s2.max_iter, 1)), np.full((s2.max_iter, 4), s2.noise_rate), v, b2, 10.0
    )
    assert p2[-1].max() == pytest.approx(1.0 / 1.01, rel=1e-6) and np.all(s2.penalty >= s2.theta)
    shared = public_pp_schedule(1.0, degrees=v, sizes=b, loss_weight=10.0, l2_penalty=1e-2, shared=True)
    assert np.all(shared.penalty == shared.penalty.max())
    with pytest.raises(InvalidParameterError, match="sizes"):
        public_pp_schedule(1.0, degrees=v, sizes=b[:3], loss_weight=1.0, l2_penalty=1e-2)


def test_public_schedule_run_is_calibrated_and_converges() -> None:
    data, x, y = _data()
    topo = ring(4)
    sizes = np.array([a.shape[0] for a, _ in data])
    lam, c = 1e-2, 10.0
    s = public_pp_schedule(2.0, degrees=topo.degrees, sizes=sizes, loss_weight=c, l2_penalty=lam)
    # non-private M-ADMM with the same penalties: the objective decreases (the paper's growing η stalls)
    common = dict(loss_weight=c, reg=c * 4 * lam)
    plain = PrivateADMM(topo, method="m-admm", **s.kwargs(), **common).run(data, rng=0, record_models=True)
    acc = [float(np.mean((x @ plain.models_history[t].mean(axis=0)) * y > 0)) for t in (0, s.max_iter)]
    assert acc[1] > acc[0] + 0.2
    res = PrivateADMM(topo, method="pp", budget=Budget(2.0, 0.0), **s.kwargs(), **common).run(
        data, rng=0, record_models=True
    )
    assert res.privacy.epsilon == pytest.approx(2.0, rel=1e-6) and res.privacy.epsilon <= 2.0
    avg = res.round_average(s.average_from)
    assert np.allclose(avg, res.models_history[s.average_from :].mean(axis=(0, 1)))
    with pytest.raises(InvalidParameterError, match="record_models"):
        PrivateADMM(topo, method="pp", budget=Budget(2.0, 0.0), **s.kwargs(), **common).run(
            data, rng=0
        ).round_average()


def test_one_round_per_site_noise_spends_exactly_the_budget_per_node() -> None:
    v = np.array([1.0, 2.0, 3.0, 2.0])
    b = np.array([60.0, 400.0, 2500.0, 10000.0])
    eps, lam, c = 2.0, 1e-3, 10.0
    s = public_pp_schedule(
        eps,
        degrees=v,
        sizes=b,
        loss_weight=c,
        l2_penalty=lam,
        n_rounds=1,
        min_noise_rate=2.0,
        per_site_noise=True,
    )
    assert s.noise_rates is not None and s.weights is not None
    # one α_i per node: the floor for small nodes, ε'·B_i·λ/2 − 1.4c₁ (extra ridge ≈ λ) for large ones
    assert np.all(s.noise_rates >= 2.0 * (1 - 1e-9)) and s.noise_rates[0] == pytest.approx(2.0)
    assert s.noise_rates[3] == pytest.approx(eps / 1.01 * 10000 * lam / 2 - 0.35, rel=1e-6)
    assert np.all(np.diff(s.noise_rates[1:]) >= 0) and s.noise_rate == s.noise_rates.min()
    p = pp_privacy_bound(s.penalty[None, :], s.noise_rates[None, :], v, b, c)
    assert np.allclose(p[-1], eps / 1.01, rtol=1e-6) and np.all(p[-1] <= eps / 1.01)
    # power: one node given a 1 % smaller noise (larger α) than the rule overspends
    planted = s.noise_rates.copy()
    planted[2] *= 1.01
    assert pp_privacy_bound(s.penalty[None, :], planted[None, :], v, b, c)[-1].max() > eps / 1.01
    assert s.thetas is not None and np.array_equal(s.thetas, s.penalty)  # one round: θ_i = η_i
    assert np.all(2 * 0.25 < (b / c) * (c * lam + 2 * s.thetas * v))
    assert np.allclose(s.weights, b / b.sum()) and s.average_from == 1 and s.max_iter == 1
    # the shared rule (default) is unchanged: one α for all nodes, none passed to the run
    shared = public_pp_schedule(eps, degrees=v, sizes=b, loss_weight=c, l2_penalty=lam)
    assert shared.noise_rates is None and "noise_rate" not in shared.kwargs()
    assert shared.max_iter == 5 and shared.noise_rate == 5.0


def test_one_round_run_is_within_budget_and_weighted_average_is_post_processing() -> None:
    data = _data()[0]
    topo = ring(4)
    sizes = np.array([a.shape[0] for a, _ in data])
    lam, c = 1e-2, 10.0
    common = dict(loss_weight=c, reg=c * 4 * lam)
    for method, shared in (("pp", False), ("dvp", True)):
        s = public_pp_schedule(
            1.0, degrees=topo.degrees, sizes=sizes, loss_weight=c, l2_penalty=lam, n_rounds=1,
            min_noise_rate=2.0, per_site_noise=True, shared=shared,
        )  # fmt: skip
        kw = s.kwargs(method)
        assert "noise_rate" in kw
        with warnings.catch_warnings():
            warnings.simplefilter("error", UserWarning)  # per-node θ with one round: no bias warning
            res = PrivateADMM(topo, method=method, budget=Budget(1.0, 0.0), **kw, **common).run(
                data, rng=5, record_models=True
            )
        assert res.rounds == 1 and res.privacy.epsilon <= 1.0
        assert np.allclose(res.node_privacy, 1.0, rtol=1e-6)  # every node spends its whole budget
        assert res.models_history is not None
        w = res.round_average(s.average_from, s.weights)
        manual = (sizes[:, None] * res.models_history[1]).sum(axis=0) / sizes.sum()
        assert np.allclose(w, manual)
        assert not np.allclose(w, res.round_average(s.average_from))
    with pytest.raises(InvalidParameterError, match="weights"):
        res.round_average(1, np.array([1.0, -1.0, 1.0, 1.0]))
    with pytest.raises(InvalidParameterError, match="weights"):
        res.round_average(1, np.ones(3))
    with pytest.raises(InvalidParameterError, match="weights"):
        res.round_average(1, np.zeros(4))
    # the same per-node θ over two rounds does bias the consensus, and still warns
    two = {**s.kwargs("pp"), "max_iter": 2, "theta": np.array([0.2, 0.1, 0.1, 0.1]), "penalty": 0.5}
    with pytest.warns(UserWarning, match="node-dependent"):
        PrivateADMM(topo, method="pp", budget=Budget(4.0, 0.0), **two, **common).run(data, rng=5)
