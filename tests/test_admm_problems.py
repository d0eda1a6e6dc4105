"""PrivateADMM on an ERMProblem (issue 14 §5): constants from declared bounds, refused losses."""

from __future__ import annotations

import numpy as np
import pytest

from dpopt.datasets import make_logistic
from dpopt.distributed.admm import PrivateADMM
from dpopt.distributed.admm_privacy import loss_constants, pp_privacy_bound
from dpopt.distributed.topology import ring, split_rows
from dpopt.exceptions import BoundsViolationError, InvalidParameterError, MissingDataBoundsError
from dpopt.problems import DataBounds, ERMProblem, L2Ball, SmoothHingeLoss


def _data(n_nodes: int = 4, scale: float = 1.0) -> list:
    ds = make_logistic(400, 5, rng=0)
    parts = split_rows(400, n_nodes, rng=1)
    return [(scale * ds.X[p], ds.y[p]) for p in parts]


KW = {"method": "pp", "noise_rate": 3.0, "max_iter": 4, "loss_weight": 10.0}


def test_default_problem_is_the_seed_setting() -> None:
    data = _data()
    seed = PrivateADMM(ring(4), reg=0.4, **KW).run(data, rng=3)
    problem = ERMProblem("logistic", DataBounds(feature_norm=1.0), l2_penalty=0.4 / (10.0 * 4))
    same = PrivateADMM(ring(4), problem=problem, **KW).run(data, rng=3)
    assert np.array_equal(seed.models, same.models)
    assert np.array_equal(seed.node_privacy_history, same.node_privacy_history)
    assert seed.parameters["c1"] == 0.25 and seed.parameters["lipschitz"] == 1.0
    assert seed.parameters["loss"] == "logistic"


def test_constants_scale_with_the_declared_feature_norm() -> None:
    # rows of norm <= 2 declared as such: c₁ = 1/4·4, G = 2; the ledger is the seed's formula with them
    data = _data(scale=2.0)
    problem = ERMProblem("logistic", DataBounds(feature_norm=2.0), l2_penalty=0.01)
    alg = PrivateADMM(ring(4), problem=problem, **KW)
    res = alg.run(data, rng=0)
    sizes = np.array([x.shape[0] for x, _ in data], dtype=float)
    exact = pp_privacy_bound(
        alg.penalty_table(), np.full((4, 4), 3.0), ring(4).degrees, sizes, 10.0, 1.0, 2.0
    )
    np.testing.assert_allclose(res.node_privacy_history, 1.01 * exact, rtol=1e-12)
    # the same rows against the default ‖x‖ <= 1 are refused (or clipped on request)
    with pytest.raises(BoundsViolationError, match="feature_norm"):
        PrivateADMM(ring(4), **KW).run(data, rng=0)
    clipped = ERMProblem("logistic", DataBounds(feature_norm=1.0, clip=True), l2_penalty=0.01)
    assert np.isfinite(PrivateADMM(ring(4), problem=clipped, **KW).run(data, rng=0).privacy.epsilon)


def test_smooth_hinge_is_covered_and_solved() -> None:
    problem = ERMProblem(SmoothHingeLoss(0.5), DataBounds(feature_norm=1.0), l2_penalty=0.05)
    c = loss_constants(problem, 5)
    assert (c.loss, c.c1, c.lipschitz, c.covered) == ("smooth_hinge", 2.0, 1.0, "")
    res = PrivateADMM(ring(4), problem=problem, **{**KW, "loss_weight": 1.0}).run(_data(), rng=0)
    assert np.isfinite(res.privacy.epsilon)
    assert float(res.nonprivate_history["local_grad_norm"].max()) <= 1e-9
    assert res.parameters["loss"] == "smooth_hinge(0.5)" and res.parameters["c1"] == 2.0


def test_squared_loss_runs_non_private_and_is_refused_private() -> None:
    g = np.random.default_rng(0)
    w = g.normal(size=5)
    data = []
    for _ in range(4):
        x = g.normal(size=(50, 5)) / 3
        data.append((x, x @ w + 0.1 * g.normal(size=50)))
    problem = ERMProblem("squared", DataBounds(feature_norm=5.0, label_bound=10.0), l2_penalty=1e-3)
    res = PrivateADMM(
        ring(4), method="m-admm", problem=problem, max_iter=400, loss_weight=1.0, penalty=0.2, theta=0.2
    ).run(data, rng=0)
    # the consensus solves the pooled ridge problem Σ_i (C/B_i)Σ½(xᵀf − y)² + ρ/2‖f‖², ρ = C·N·λ
    X = np.vstack([x for x, _ in data])
    Y = np.concatenate([y for _, y in data])
    ridge = np.linalg.solve(X.T @ X / 50 + 4e-3 * np.eye(5), X.T @ Y / 50)
    np.testing.assert_allclose(res.average_model, ridge, atol=1e-4)
    with pytest.raises(InvalidParameterError, match="unbounded derivative"):
        PrivateADMM(ring(4), problem=problem, **KW)


def test_refusals_name_the_problem() -> None:
    with pytest.raises(InvalidParameterError, match="unconstrained"):
        PrivateADMM(ring(4), problem=ERMProblem("logistic", DataBounds(1.0), L2Ball(5), 0.1), **KW)
    with pytest.raises(InvalidParameterError, match="l2_penalty"):
        PrivateADMM(ring(4), problem=ERMProblem("logistic", DataBounds(1.0)), **KW)
    with pytest.raises(InvalidParameterError, match="reg"):
        PrivateADMM(ring(4), problem=ERMProblem("logistic", DataBounds(1.0), l2_penalty=0.1), reg=0.1, **KW)
    with pytest.raises(MissingDataBoundsError, match="feature_norm"):
        PrivateADMM(ring(4), problem=ERMProblem("logistic", l2_penalty=0.1), **KW)
    # undeclared bounds are fine without privacy
    PrivateADMM(ring(4), method="m-admm", problem=ERMProblem("logistic", l2_penalty=0.1), max_iter=2)
