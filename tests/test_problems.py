"""Tests of dpopt.problems: losses, declared bounds, constraint sets, ERMProblem constants."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
import scipy.sparse
from scipy.optimize import minimize as sp_minimize

from dpopt.exceptions import BoundsViolationError, InvalidParameterError, MissingDataBoundsError
from dpopt.problems import (
    DataBounds,
    ERMProblem,
    GroupL1Ball,
    InterpolationBall,
    L1Ball,
    L2Ball,
    LogisticLoss,
    NuclearBall,
    Polytope,
    Simplex,
    SmoothHingeLoss,
    SquaredLoss,
    make_loss,
    project_l1_ball,
    project_simplex,
)


@pytest.mark.parametrize("loss", [LogisticLoss(), SquaredLoss(), SmoothHingeLoss(0.5)])
def test_loss_derivative_matches_finite_differences(loss):
    rng = np.random.default_rng(0)
    z = rng.uniform(-3, 3, 200)
    y = rng.choice([-1.0, 1.0], 200)
    h = 1e-6
    fd = (loss.value(z + h, y) - loss.value(z - h, y)) / (2 * h)
    np.testing.assert_allclose(loss.derivative(z, y), fd, atol=1e-5)


@pytest.mark.parametrize("loss", [LogisticLoss(), SquaredLoss(), SmoothHingeLoss(0.5)])
def test_loss_bounds_hold(loss):
    rng = np.random.default_rng(1)
    z = rng.uniform(-2, 2, 1000)
    y = rng.uniform(-1, 1, 1000)
    assert np.all(np.abs(loss.derivative(z, y)) <= loss.derivative_bound(2.0, 1.0) + 1e-12)
    h = 1e-4
    second = (loss.derivative(z + h, y) - loss.derivative(z - h, y)) / (2 * h)
    assert np.all(second <= loss.curvature_bound(1.0) + 1e-6)


def test_make_loss():
    assert isinstance(make_loss("logistic"), LogisticLoss)
    with pytest.raises(InvalidParameterError):
        make_loss("hinge-ish")


# ------------------------------------------------------------------ bounds
def test_missing_bounds_raise():
    prob = ERMProblem("logistic", DataBounds(), L2Ball(3))
    X = np.zeros((4, 3))
    with pytest.raises(MissingDataBoundsError):
        prob.prepare(X, np.ones(4))
    with pytest.raises(MissingDataBoundsError):
        prob.lipschitz()
    sq = ERMProblem("squared", DataBounds(1.0), L2Ball(3))
    with pytest.raises(MissingDataBoundsError, match="label_bound"):
        sq.lipschitz()


def test_bound_violation_raises_without_values_and_clips_on_request():
    X = np.array([[3.0, 4.0], [0.1, 0.2]])
    y = np.array([1.0, -1.0])
    prob = ERMProblem("logistic", DataBounds(1.0), L2Ball(2))
    with pytest.raises(BoundsViolationError) as info:
        prob.prepare(X, y)
    assert "3.0" not in str(info.value) and "1 of 2 rows" in str(info.value)
    clipped = ERMProblem("logistic", DataBounds(1.0, clip=True), L2Ball(2))
    Xc, _ = clipped.prepare(X, y)
    np.testing.assert_allclose(Xc[0], [0.6, 0.8])
    np.testing.assert_allclose(Xc[1], X[1])
    # l_inf bounds and labels
    sq = ERMProblem("squared", DataBounds(1.0, "linf", 1.0, clip=True), L1Ball(2))
    Xc, yc = sq.prepare(np.array([[2.0, -0.5]]), np.array([3.0]))
    np.testing.assert_allclose(Xc, [[1.0, -0.5]])
    np.testing.assert_allclose(yc, [1.0])
    # sparse input clips too
    Xs, _ = clipped.prepare(scipy.sparse.csr_matrix(X), y)
    np.testing.assert_allclose(Xs.toarray(), clipped.prepare(X, y)[0])


def test_shape_errors():
    prob = ERMProblem("logistic", DataBounds(1.0), L2Ball(3))
    with pytest.raises(InvalidParameterError, match="columns"):
        prob.prepare(np.zeros((2, 4)), np.ones(2))
    with pytest.raises(InvalidParameterError, match="entries"):
        prob.prepare(np.zeros((2, 3)), np.ones(3))
    with pytest.raises(InvalidParameterError):
        L2Ball(3, radius=-1.0)
    with pytest.raises(InvalidParameterError):
        GroupL1Ball(3, group_size=5)
    with pytest.raises(InvalidParameterError, match="bounded constraint"):
        ERMProblem("squared", DataBounds(1.0, label_bound=1.0)).lipschitz(dim=3)


def test_from_dataset():
    from dpopt.datasets import make_logistic

    ds = make_logistic(50, 3, rng=0)
    b = DataBounds.from_dataset(ds)
    assert b.feature_norm == 1.0 and b.norm == "l2" and b.label_bound == 1.0


# ------------------------------------------------------------------ constraint sets
SETS = [
    L2Ball(4, 1.5),
    L1Ball(4, 2.0),
    Simplex(4),
    Polytope(np.array([[1.0, 0, 0, 0], [0, 1.0, 0, 0], [-1.0, -1.0, 0.5, 0], [0, 0, -1.0, 1.0]])),
    GroupL1Ball(5, 2, 1.0),
    NuclearBall(2, 2, 1.0),
    InterpolationBall(4, 0.4, 1.2),
]


@pytest.mark.parametrize("C", SETS, ids=lambda c: type(c).__name__)
def test_projection_agrees_with_generic_solver(C):
    rng = np.random.default_rng(2)
    for _ in range(3):
        v = rng.normal(scale=2.0, size=C.dim)
        p = C.project(v)
        assert C.contains(p, tol=1e-6)
        # compare with a generic solver: min ||w - v||² over C via a random feasible comparison set
        cands = [C.project(p + 1e-3 * rng.normal(size=C.dim)) for _ in range(200)]
        assert all(np.linalg.norm(p - v) <= np.linalg.norm(c - v) + 1e-9 for c in cands)


def test_simplex_and_l1_projection_against_slsqp():
    rng = np.random.default_rng(3)
    v = rng.normal(size=5)
    cons = [{"type": "eq", "fun": lambda w: w.sum() - 1}]
    ref = sp_minimize(
        lambda w: ((w - v) ** 2).sum(), np.full(5, 0.2), bounds=[(0, None)] * 5, constraints=cons
    )
    np.testing.assert_allclose(project_simplex(v), ref.x, atol=1e-5)
    w = project_l1_ball(3 * v, 1.0)
    assert abs(np.abs(w).sum() - 1) < 1e-12


@pytest.mark.parametrize("C", SETS, ids=lambda c: type(c).__name__)
def test_lmo_is_optimal_and_support_matches(C):
    rng = np.random.default_rng(4)
    for _ in range(5):
        g = rng.normal(size=C.dim)
        s = C.lmo(g)
        assert C.contains(s, tol=1e-6)
        assert math.isclose(-float(g @ s), C.support(-g), rel_tol=1e-9, abs_tol=1e-12)
        pts = [C.project(rng.normal(scale=3, size=C.dim)) for _ in range(100)]
        assert all(g @ s <= g @ q + 1e-9 for q in pts)


@pytest.mark.parametrize("C", SETS, ids=lambda c: type(c).__name__)
def test_radii(C):
    rng = np.random.default_rng(5)
    pts = [C.project(rng.normal(scale=5, size=C.dim)) for _ in range(200)]
    assert max(np.linalg.norm(p) for p in pts) <= C.radius_l2 + 1e-9
    assert max(np.abs(p).sum() for p in pts) <= C.radius_l1 + 1e-9


@pytest.mark.parametrize("C", [L2Ball(50), L1Ball(50), Simplex(50)], ids=lambda c: type(c).__name__)
def test_gaussian_width_exact_vs_monte_carlo(C):
    exact = C.gaussian_width()
    mc = C.gaussian_width(method="monte_carlo", n_draws=4000, rng=0)
    assert exact.method in ("exact", "integral")
    assert abs(exact.value - mc.value) <= max(4 * mc.stderr, 0.02 * exact.value)


def test_gaussian_width_closed_forms():
    assert math.isclose(L2Ball(100).gaussian_width().value, math.sqrt(99.5), rel_tol=1e-3)
    assert L1Ball(100).gaussian_width().value <= math.sqrt(2 * math.log(200))
    nuc = NuclearBall(8, 8).gaussian_width(rng=0)
    assert nuc.method == "monte_carlo" and nuc.stderr > 0
    assert 0.6 * 2 * math.sqrt(8) < nuc.value < 1.1 * 2 * math.sqrt(8)


def test_vertex_oracles_consistent():
    sets: list[Any] = [L1Ball(3, 2.0), Simplex(3, 1.5), SETS[3]]
    for C in sets:
        V = np.asarray(
            C.vertex_matrix().todense() if scipy.sparse.issparse(C.vertex_matrix()) else C.vertex_matrix()
        )
        g = np.array([0.3, -1.0, 0.7] + [0.1] * (C.dim - 3))
        np.testing.assert_allclose(C.vertex_scores(g), V.T @ g)
        for k in range(C.n_vertices):
            np.testing.assert_allclose(C.vertex(k), V[:, k])


# ------------------------------------------------------------------ problem constants
def test_lasso_constants_match_spec():
    prob = ERMProblem("squared", DataBounds(1.0, "linf", 1.0), L1Ball(50, 1.0))
    assert prob.lipschitz("linf") == 2.0  # L1 = 2
    assert prob.curvature() == 4.0  # Γ <= 4
    assert math.isclose(prob.smoothness(), 50.0)  # ‖x‖₂² <= p


@pytest.mark.parametrize("loss", ["logistic", "squared", "smooth_hinge"])
def test_declared_lipschitz_bounds_hold_on_c(loss):
    rng = np.random.default_rng(6)
    p = 6
    C = L1Ball(p, 1.5)
    prob = ERMProblem(loss, DataBounds(1.0, label_bound=1.0), C, l2_penalty=0.0)
    X = rng.normal(size=(300, p))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    y = rng.choice([-1.0, 1.0], 300)
    for _ in range(20):
        th = C.project(rng.normal(scale=3, size=p))
        for i in range(0, 300, 30):
            g = prob.gradient(th, X[i : i + 1], y[i : i + 1])
            assert np.linalg.norm(g) <= prob.lipschitz("l2") + 1e-12
            assert np.abs(g).max() <= prob.lipschitz("linf") + 1e-12


def test_gradient_and_objective_consistent_dense_and_sparse():
    rng = np.random.default_rng(7)
    X = rng.normal(size=(40, 5)) / 3
    X[X < 0.1] = 0.0
    y = rng.choice([-1.0, 1.0], 40)
    prob = ERMProblem("logistic", DataBounds(10.0), L2Ball(5, 3.0), l2_penalty=0.1)
    th = rng.normal(size=5)
    h = 1e-6
    fd = np.array(
        [(prob.objective(th + h * e, X, y) - prob.objective(th - h * e, X, y)) / (2 * h) for e in np.eye(5)]
    )
    np.testing.assert_allclose(prob.gradient(th, X, y), fd, atol=1e-6)
    Xs = scipy.sparse.csr_matrix(X)
    np.testing.assert_allclose(prob.gradient(th, Xs, y), prob.gradient(th, X, y), atol=1e-14)
    assert math.isclose(prob.objective(th, Xs, y), prob.objective(th, X, y))


def test_interpolation_ball_matches_slsqp_projection_and_width_between_l1_and_l2():
    C = InterpolationBall(5, 0.3, 1.0)
    rng = np.random.default_rng(8)
    v = rng.normal(scale=2, size=5)
    cons = [{"type": "ineq", "fun": lambda w: C.radius - C.norm(w)}]
    ref = sp_minimize(
        lambda w: ((w - v) ** 2).sum(),
        np.zeros(5),
        constraints=cons,
        method="SLSQP",
        options={"ftol": 1e-14, "maxiter": 500},
    )
    np.testing.assert_allclose(C.project(v), ref.x, atol=1e-5)
    w = C.gaussian_width(rng=0, n_draws=500).value
    assert L1Ball(5).gaussian_width().value < w < L2Ball(5).gaussian_width().value
    with pytest.raises(InvalidParameterError):
        InterpolationBall(5, 1.0)
