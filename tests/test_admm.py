"""Private distributed ADMM (dpopt.distributed.admm): convergence, privacy ledger, validation."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.optimize import minimize

from dpopt.accounting import Budget
from dpopt.datasets import make_logistic
from dpopt.distributed._admm_node import keyed_generator, l2_laplace_draw, solve_local
from dpopt.distributed.admm import (
    LocalSolveError,
    PrivateADMM,
    Schedule,
    calibrate_noise_rate,
    centralized_solution,
    geometric,
    pp_privacy_bound,
    pp_privacy_bound_geometric,
    primal_privacy_bound,
)
from dpopt.distributed.topology import complete, erdos_renyi, ring, split_rows
from dpopt.exceptions import (
    BoundsViolationError,
    BudgetExceededError,
    InvalidParameterError,
    PrivacyClaimWarning,
)
from dpopt.mechanisms import l2_laplace_noise


def _data(n_nodes: int = 4, n: int = 400, d: int = 5, how: str = "even", seed: int = 0) -> list:
    ds = make_logistic(n, d, rng=seed)
    parts = split_rows(n, n_nodes, how=how, rng=seed + 1, min_size=10)  # type: ignore[arg-type]
    return [(ds.X[p], ds.y[p]) for p in parts]


# ---------------------------------------------------------------------------------------------
# Non-private convergence to the centralised optimum
# ---------------------------------------------------------------------------------------------


def test_centralized_solution_matches_scipy() -> None:
    data = _data(how="dirichlet")
    c, rho = 10.0, 1.0

    def obj(f: np.ndarray) -> float:
        return sum(c / x.shape[0] * np.logaddexp(0, -y * (x @ f)).sum() for x, y in data) + 0.5 * rho * f @ f

    ref = minimize(obj, np.zeros(5), method="BFGS", options={"gtol": 1e-10}).x
    f = centralized_solution(data, loss_weight=c, reg=rho)
    assert np.allclose(f, ref, atol=1e-6)


@pytest.mark.parametrize(
    ("topo", "method", "penalty"),
    [
        (ring(4), "admm", 0.5),
        (complete(4), "admm", 0.5),
        (erdos_renyi(5, 0.5, rng=2), "m-admm", 0.5),
        (ring(4), "m-admm", geometric([0.5, 0.6, 0.55, 0.65], [1.0, 1.005, 1.01, 1.0])),
    ],
)
def test_nonprivate_reaches_centralized_optimum(topo, method, penalty) -> None:
    data = _data(n_nodes=topo.n_nodes, how="dirichlet")
    fc = centralized_solution(data, loss_weight=10.0, reg=1.0)
    res = PrivateADMM(topo, method=method, penalty=penalty, max_iter=120, loss_weight=10.0, reg=1.0).run(
        data, rng=0
    )
    assert np.abs(res.models - fc).max() < 1e-6
    assert res.nonprivate_history["consensus_error"][-1] < 1e-6
    assert math.isinf(res.privacy.epsilon)
    assert res.status == "completed" and res.rounds == 120
    # achieved local gradient norms are reported and tiny
    assert res.nonprivate_history["local_rel_grad_norm"].max() <= 1e-10


# ---------------------------------------------------------------------------------------------
# Local subproblem and noise
# ---------------------------------------------------------------------------------------------


def test_pp_local_solution_is_minimiser_of_the_penalty_perturbed_objective() -> None:
    """Spec test 13: the λ + ηVε form solves the original PP subproblem (24)."""
    rng = np.random.default_rng(0)
    x, y = _data()[0]
    xy = y[:, None] * x
    d = x.shape[1]
    lam = rng.normal(size=d)
    nbr = rng.normal(size=(3, d))  # a_j = ½(f_i(t) + f_j(t)) for V_i = 3 neighbours
    eps = l2_laplace_draw(3.0, d, rng)
    eta, c, reg = 0.7, 10.0, 0.25
    v = nbr.shape[0]
    f, *_ = solve_local(
        xy,
        np.zeros(d),
        cw=c / x.shape[0],
        reg=reg,
        lin=2 * (lam + eta * v * eps),
        center=nbr.mean(axis=0),
        pen=eta * v,
        tol=1e-12,
        max_iter=50,
    )
    sig = 1 / (1 + np.exp(y * (x @ f)))
    grad = -c / x.shape[0] * (xy.T @ sig) + reg * f + 2 * lam + 2 * eta * (f + eps - nbr).sum(axis=0)
    assert np.linalg.norm(grad) < 1e-8


def test_inexact_local_solve_stops_the_run() -> None:
    alg = PrivateADMM(
        ring(4), method="pp", noise_rate=3.0, max_iter=2, loss_weight=10.0, local_tol=1e-30, local_max_iter=1
    )
    with pytest.raises(LocalSolveError, match="exact local solves") as info:
        alg.run(_data(), rng=0)
    # names the public tolerance and cap, never the achieved (data-dependent) gradient norm
    assert "local_tol=1e-30" in str(info.value) and "local_max_iter=1 " in str(info.value)
    assert "gradient norm 0" not in str(info.value) and "e+" not in str(info.value)


def test_inexact_local_solves_are_certified_and_paid_for() -> None:
    data = _data()
    kw = {"method": "pp", "noise_rate": 3.0, "max_iter": 3, "loss_weight": 10.0}
    res = PrivateADMM(ring(4), **kw).run(data, rng=0)
    note = [s for s in res.privacy.notes if "certified" in s]
    assert len(note) == 1 and "solve_tol=1e-09" in note[0]
    assert float(res.nonprivate_history["local_grad_norm"].max()) <= 1e-9
    # the exact-solve bound of the seed (inexact_fraction=0) is reported only with a warning ...
    with pytest.warns(PrivacyClaimWarning, match="not accounted"):
        exact = PrivateADMM(ring(4), inexact_fraction=0.0, **kw).run(data, rng=0)
    assert any("exact local minimisers" in s for s in exact.privacy.notes)
    # ... and the certified run pays (1 + f) times it: f for the output noise covering the residual
    np.testing.assert_allclose(res.node_privacy_history, 1.01 * exact.node_privacy_history, rtol=1e-12)
    # the output noise is what makes the two runs differ (same key, same main noise)
    assert not np.array_equal(res.models, exact.models)
    assert float(np.abs(res.models - exact.models).max()) < 1e-2
    # its rate is f·ΔP_i(t)·μ_i(t)/(2·solve_tol): ε added per round = 2·rate·solve_tol/μ = f·ΔP
    alg = PrivateADMM(ring(4), **kw)
    sizes = np.array([x.shape[0] for x, _ in data], dtype=float)
    alpha = alg._alpha_table(sizes)
    rate = alg._inexact_rate_table(sizes, alpha)
    assert rate is not None
    mu = alg.reg / 4 + 2 * alg._penalty * ring(4).degrees[None, :]
    added = 2 * rate * alg.solve_tol / mu
    np.testing.assert_allclose(
        np.cumsum(added, axis=0), 0.01 * alg._exact_solve_bound(sizes, alpha), rtol=1e-9
    )
    # an uncertifiable absolute tolerance stops the run and names only public settings
    with pytest.raises(LocalSolveError, match="solve_tol=1e-30"):
        PrivateADMM(ring(4), solve_tol=1e-30, local_max_iter=3, **kw).run(data, rng=0)


def test_loose_relative_tolerance_warns_when_the_residual_is_not_paid_for() -> None:
    loose = PrivateADMM(
        ring(4),
        method="primal",
        noise_rate=3.0,
        max_iter=2,
        loss_weight=10.0,
        local_tol=1e-4,
        inexact_fraction=0.0,
    )
    with pytest.warns(PrivacyClaimWarning, match="heuristic"):
        res2 = loose.run(_data(), rng=0)
    assert any("heuristic" in s and "primal-perturbation" in s for s in res2.privacy.notes)


def test_inlined_sampler_equals_mechanisms_sampler() -> None:
    a = l2_laplace_draw(2.5, 7, keyed_generator((1, 2), 3, 4, 1))
    b = l2_laplace_noise(2.5, 7, rng=keyed_generator((1, 2), 3, 4, 1))
    assert np.array_equal(a, b)


def test_dvp_equals_pp_with_constant_penalty_theta() -> None:
    data = _data()
    kw = {"max_iter": 8, "loss_weight": 10.0, "reg": 1.0, "noise_rate": 3.0, "theta": 0.5}
    dvp = PrivateADMM(ring(4), method="dvp", **kw).run(data, rng=11)
    pp = PrivateADMM(ring(4), method="pp", penalty=0.5, **kw).run(data, rng=11)
    assert np.array_equal(dvp.models, pp.models)
    assert np.array_equal(dvp.node_privacy_history, pp.node_privacy_history)


def test_same_seed_same_result_and_seed_matters() -> None:
    data = _data()
    alg = PrivateADMM(
        ring(4),
        method="pp",
        penalty=geometric(0.5, 1.05),
        noise_rate=3.0,
        max_iter=5,
        loss_weight=10.0,
        reg=1.0,
        init="normal",
    )
    a, b, c = alg.run(data, rng=1), alg.run(data, rng=1), alg.run(data, rng=2)
    assert np.array_equal(a.models, b.models)
    assert not np.array_equal(a.models, c.models)
    sec = alg.run(data, rng="secure")  # run key from the OS CSPRNG (noise: floating point, keyed by it)
    assert np.all(np.isfinite(sec.models)) and any("OS CSPRNG" in n for n in sec.privacy.notes)
    s = alg.run(data, rng=None)
    assert np.all(np.isfinite(s.models))


# ---------------------------------------------------------------------------------------------
# Privacy ledger
# ---------------------------------------------------------------------------------------------


def test_privacy_ledger_by_hand() -> None:
    """ring(2): V = 1; B = (10, 20), C = 1, θ = η = 0.5, α = 2, T = 3, c₁ = 1/4.

    Per round: node 0: 1·(1.4·0.25 + 2)/(0.5·1·10) = 0.47;  node 1: 2.35/10 = 0.235 (the seed's
    exact-solve bound), times 1.01: the default 1 % paid for the certified inexact local solves.
    """
    rng = np.random.default_rng(0)
    x = rng.normal(size=(30, 3))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    y = np.where(rng.random(30) < 0.5, -1.0, 1.0)
    data = [(x[:10], y[:10]), (x[10:], y[10:])]
    res = PrivateADMM(ring(2), method="pp", penalty=0.5, theta=0.5, noise_rate=2.0, max_iter=3, reg=1.0).run(
        data, rng=0
    )
    expected = 1.01 * np.array([[0.47, 0.235], [0.94, 0.47], [1.41, 0.705]])
    assert np.allclose(res.node_privacy_history, expected)
    assert np.allclose(res.privacy_history, 1.01 * np.array([0.47, 0.94, 1.41]))
    assert res.privacy.epsilon == pytest.approx(1.01 * 1.41)
    assert res.privacy.neighbouring == "replace_one"
    assert res.worst_node == 0
    # primal perturbation: Δ_i = 2C/(B_i(ρ/N + 2ηV_i)) = 2/(10·1.5), 2/(20·1.5); ε_i per round = αΔ_i
    prim = PrivateADMM(ring(2), method="primal", penalty=0.5, noise_rate=2.0, max_iter=3, reg=1.0).run(
        data, rng=0
    )
    per = 1.01 * np.array([4 / 15, 2 / 15])
    assert np.allclose(prim.node_privacy_history, np.outer([1, 2, 3], per))


def test_closed_form_equals_running_sum_and_saturation() -> None:
    deg, sizes = np.array([2, 3, 2]), np.array([100, 50, 80])
    t, theta, q1, alpha1, q2 = 40, 0.5, 1.05, 3.0, 1.02
    r = np.arange(t)[:, None]
    eta = theta * q1**r * np.ones((1, 3))
    alpha = alpha1 * q2**r * np.ones((1, 3))
    run = pp_privacy_bound(eta, alpha, deg, sizes, loss_weight=2.0)
    for tt in (1, 7, 40):
        closed = pp_privacy_bound_geometric(tt, theta, q1, alpha1, q2, deg, sizes, loss_weight=2.0)
        assert closed == pytest.approx(run[tt - 1].max(), rel=1e-12)
    assert pp_privacy_bound_geometric(10, theta, 1.0, alpha1, 1.0, deg, sizes) == pytest.approx(
        pp_privacy_bound(np.full((10, 3), theta), np.full((10, 3), alpha1), deg, sizes)[-1].max()
    )
    assert math.isfinite(pp_privacy_bound_geometric(math.inf, theta, 1.1, alpha1, 1.03, deg, sizes))
    assert math.isinf(pp_privacy_bound_geometric(math.inf, theta, 1.0, alpha1, 1.0, deg, sizes))  # DVP
    assert math.isinf(pp_privacy_bound_geometric(math.inf, theta, 1.05, alpha1, 1.1, deg, sizes))


def test_budget_calibration_and_refusal() -> None:
    data = _data()
    sizes = [x.shape[0] for x, _ in data]
    alg = PrivateADMM(
        ring(4),
        method="pp",
        penalty=geometric(0.5, 1.05),
        budget=Budget(2.0),
        max_iter=10,
        loss_weight=10.0,
        reg=1.0,
    )
    res = alg.run(data, rng=0)
    assert res.privacy.epsilon == pytest.approx(2.0)
    a1 = calibrate_noise_rate(  # the main noise gets 2.0/1.01: 1 % pays for the inexact local solves
        2.0 / 1.01, penalty=alg.penalty_table(), degrees=ring(4).degrees, sizes=sizes, loss_weight=10.0
    )
    assert res.parameters["noise_rate_initial"] == pytest.approx(a1)
    # primal calibration
    prim = PrivateADMM(ring(4), method="primal", budget=Budget(1.0), max_iter=5, loss_weight=10.0, reg=1.0)
    assert prim.run(data, rng=0).privacy.epsilon == pytest.approx(1.0)
    over = PrivateADMM(
        ring(4), method="pp", noise_rate=100.0, budget=Budget(0.5), max_iter=10, loss_weight=10.0, reg=1.0
    )
    with pytest.raises(BudgetExceededError, match="exceeds the budget"):
        over.run(data, rng=0)
    with pytest.raises(BudgetExceededError, match="noise-independent"):
        calibrate_noise_rate(1e-6, penalty=np.full((10, 4), 0.5), degrees=ring(4).degrees, sizes=sizes)


def test_primal_bound_function() -> None:
    out = primal_privacy_bound(np.full((2, 1), 1.0), np.full((2, 1), 3.0), [2], [10], 1.0, 0.5)
    assert np.allclose(out[:, 0], [3 * 2 / (10 * 4.5), 6 * 2 / (10 * 4.5)])


# ---------------------------------------------------------------------------------------------
# Validation
# ---------------------------------------------------------------------------------------------


def test_bad_data_is_rejected() -> None:
    data = _data()
    alg = PrivateADMM(ring(4), method="pp", noise_rate=3.0, max_iter=2, loss_weight=10.0, reg=1.0)
    with pytest.raises(InvalidParameterError, match="one per node"):
        alg.run(data[:3], rng=0)
    empty = [*data[:3], (np.zeros((0, 5)), np.zeros(0))]
    with pytest.raises(InvalidParameterError, match="empty node"):
        alg.run(empty, rng=0)
    mismatch = [*data[:3], (data[3][0][:, :4], data[3][1])]
    with pytest.raises(InvalidParameterError, match="features"):
        alg.run(mismatch, rng=0)
    badlab = [*data[:3], (data[3][0], np.zeros_like(data[3][1]))]
    with pytest.raises(InvalidParameterError, match="labels"):
        alg.run(badlab, rng=0)
    big = [*data[:3], (data[3][0] * 3, data[3][1])]
    with pytest.raises(BoundsViolationError, match="norm"):
        alg.run(big, rng=0)
    repro = PrivateADMM(
        ring(4), method="pp", noise_rate=3.0, max_iter=2, loss_weight=10.0, reg=1.0, mode="reproduce"
    )
    with pytest.warns(PrivacyClaimWarning):
        res = repro.run(big, rng=0)
    assert math.isinf(res.privacy.epsilon)
    with pytest.raises(InvalidParameterError, match="exceeds the smallest node size"):
        PrivateADMM(ring(4), method="pp", noise_rate=3.0, max_iter=2, loss_weight=1e6).run(data, rng=0)


def test_bad_parameters_are_rejected() -> None:
    t = ring(4)
    data = _data()
    with pytest.raises(InvalidParameterError):
        PrivateADMM(t, method="pp", noise_rate=0.0)
    with pytest.raises(InvalidParameterError):
        PrivateADMM(t, method="m-admm", penalty=-1.0)
    with pytest.raises(InvalidParameterError):
        PrivateADMM(t, method="m-admm", theta=0.0)
    with pytest.raises(InvalidParameterError, match="method"):
        PrivateADMM(t, method="bogus")  # type: ignore[arg-type]
    with pytest.raises(InvalidParameterError, match="adds no noise"):
        PrivateADMM(t, method="m-admm", noise_rate=1.0)
    with pytest.raises(InvalidParameterError, match="noise_rate or a budget"):
        PrivateADMM(t, method="pp")
    with pytest.raises(InvalidParameterError, match="η ≡ θ"):
        PrivateADMM(t, method="dvp", penalty=0.7, noise_rate=1.0)
    with pytest.raises(InvalidParameterError, match="constant penalty"):
        PrivateADMM(t, method="admm", penalty=geometric(0.5, 1.1))
    with pytest.raises(InvalidParameterError, match="θ_i"):
        PrivateADMM(t, method="pp", penalty=0.4, theta=0.5, noise_rate=1.0, loss_weight=10.0).run(data, rng=0)
    with pytest.raises(InvalidParameterError, match="table must have shape"):
        PrivateADMM(t, method="m-admm", penalty=Schedule.from_values(np.ones((3, 4))), max_iter=5)
    with pytest.raises(InvalidParameterError, match="one value per node"):
        PrivateADMM(t, method="m-admm", penalty=geometric([0.5, 0.6], 1.0))
    with pytest.raises(InvalidParameterError, match="Topology"):
        PrivateADMM("ring", method="m-admm")  # type: ignore[arg-type]


def test_schedules() -> None:
    g = geometric([1.0, 2.0], [2.0, 1.0]).table(3, 2)
    assert g.tolist() == [[1, 2], [2, 2], [4, 2]]
    assert Schedule.from_function(lambda r: 0.5 + 0.1 * 0.9**r).table(2, 3).shape == (2, 3)
    assert Schedule.from_values([1.0, 2.0, 3.0]).table(3, 2)[:, 1].tolist() == [1, 2, 3]
    assert Schedule.constant(0.5).table(2, 2).tolist() == [[0.5, 0.5], [0.5, 0.5]]


def test_time_varying_and_node_theta_run() -> None:
    data = _data()
    fc = centralized_solution(data, loss_weight=10.0, reg=1.0)
    kw = {"penalty": 0.6, "max_iter": 120, "loss_weight": 10.0, "reg": 1.0}
    res = PrivateADMM(
        ring(4), method="m-admm", theta=Schedule.from_function(lambda r: 0.5 + 0.1 * 0.9**r), **kw
    ).run(data, rng=0)
    assert np.abs(res.models - fc).max() < 1e-6
    # node-dependent θ: Σ_i λ_i is not conserved, so the consensual limit is biased (dpopt warns)
    with pytest.warns(UserWarning, match="node-dependent"):
        res = PrivateADMM(ring(4), method="m-admm", theta=[0.5, 0.45, 0.5, 0.4], **kw).run(data, rng=0)
    assert res.nonprivate_history["consensus_error"][-1] < 1e-6
    assert np.abs(res.models - fc).max() > 1e-3


def test_callback_stop_and_record_models() -> None:
    data = _data()
    seen = []

    def cb(info) -> None:
        seen.append(info.privacy_bound)
        if info.round == 3:
            raise StopIteration

    res = PrivateADMM(ring(4), method="pp", noise_rate=3.0, max_iter=10, loss_weight=10.0, reg=1.0).run(
        data, rng=0, callback=cb, record_models=True
    )
    assert res.status == "stopped" and res.rounds == 3
    assert res.models_history is not None and res.models_history.shape == (4, 4, 5)
    assert np.array_equal(res.models_history[-1], res.models)
    assert seen == pytest.approx(res.privacy_history.tolist())
    with pytest.raises(ValueError):
        res.models[0, 0] = 1.0
    assert "pp" in repr(res)


def test_adult_small(shared_datasets) -> None:
    from dpopt.datasets import load_adult

    ds = load_adult(shared_datasets / "adult")
    parts = split_rows(ds.X.shape[0], 5, rng=0)
    data = [(ds.X[p[:150]], ds.y[p[:150]]) for p in parts]
    res = PrivateADMM(
        ring(5), method="pp", penalty=geometric(0.5, 1.05), noise_rate=geometric(3.0, 1.01), max_iter=4
    ).run(data, rng=0)
    assert res.privacy.epsilon == pytest.approx(res.privacy_history[-1])
    assert np.all(np.isfinite(res.models)) and res.models.shape == (5, 105)


def test_docstring_example() -> None:
    import doctest

    import dpopt.distributed.admm as module

    assert doctest.testmod(module).failed == 0
