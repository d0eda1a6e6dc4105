"""Issue 11 §2 (gradient part): every DP gradient method returns a point of the constraint set, and
the per-example bound behind its sensitivity holds at every point where it takes a gradient.

Each method supports every :class:`~dpopt.problems.ConstraintSet` through Euclidean projection
(projected gradient; momentum methods project the new iterate and take gradients at extrapolated
points, which may leave the set, so the per-example gradients are clipped to the declared bound
there) and ``constraint=None`` (no projection; the bound then comes from clipping).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from dpopt.accounting import Budget
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
    SquaredLoss,
)
from dpopt.solvers.gradient_driver import _setup
from dpopt.solvers.gradient_options import GradientOptions
from dpopt.solvers.minimize import minimize

D = 4
SETS = {
    "l2ball": L2Ball(D, 0.3),
    "l1ball": L1Ball(D, 0.1),
    "simplex": Simplex(D, 0.5),
    "polytope": Polytope(np.array([[0.2, 0, 0, 0], [0, 0.2, 0, 0], [0, 0, -0.2, 0.1], [0.1, 0.1, 0.1, 0.1]])),
    "group_l1": GroupL1Ball(D, 2, 0.2),
    "nuclear": NuclearBall(2, 2, 0.2),
    "interpolation": InterpolationBall(D, 0.5, 0.2),
    "none": None,
}
METHODS = {
    "dp_gd": {},
    "dp_sgd": {"batch_size": 20},
    "dp_heavy_ball": {},
    "dp_nesterov": {"batch_size": 20},
    "dp_gdws": {},
    "dp_sgdws": {"batch_size": 20},
    "dp_online_gdws": {"bucket_size": 10},
    "dp_masg": {},
    "dp_mag": {},
    "dp_smag": {"batch_size": 20},
}
NO_ITER = {"dp_online_gdws"}


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(3)
    X = rng.normal(size=(200, D))
    X /= np.maximum(1.0, np.linalg.norm(X, axis=1, keepdims=True))
    y = np.where(X @ np.array([3.0, -2.0, 1.0, 0.5]) + 0.3 * rng.normal(size=200) > 0, 1.0, -1.0)
    return X, y


@pytest.mark.parametrize("set_name", list(SETS))
@pytest.mark.parametrize("method", list(METHODS))
def test_every_gradient_method_returns_a_feasible_point(method, set_name, data):
    X, y = data
    C = SETS[set_name]
    problem = ERMProblem(LogisticLoss(), DataBounds(feature_norm=1.0), C, l2_penalty=0.1)
    opts = dict(METHODS[method])
    if method not in NO_ITER:
        opts["max_iter"] = 15
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # a large ε so that the noise does not hide an unprojected step; δ = 0: Laplace (fast plans)
        res = minimize(problem, X, y, method=method, budget=Budget(50.0), rng=0, **opts)
    assert res.status == "completed"
    if C is not None:
        assert C.contains(res.solution, tol=1e-7), f"{method} left the {set_name}"


def test_issue_example_l1ball_dp_gd_is_feasible(data):
    X, y = data
    X5 = np.hstack([X, X[:, :1]]) / np.sqrt(2)
    problem = ERMProblem(LogisticLoss(), DataBounds(feature_norm=1.0), L1Ball(5, 0.1))
    res = minimize(problem, X5, y, method="dp_gd", budget=Budget(5, 1e-5), rng=0)
    assert np.abs(res.solution).sum() <= 0.1 * (1 + 1e-9)  # was 0.99 before projection
    # planted bug: the same run without projection leaves the set (shows the test has power)
    from dpopt.solvers import gradient

    orig = gradient._Context.project
    try:
        gradient._Context.project = lambda self, x: x  # type: ignore[method-assign]
        bad = gradient.dp_gd(problem, X5, y, budget=Budget(5, 1e-5), rng=0)
    finally:
        gradient._Context.project = orig  # type: ignore[method-assign]
    assert np.abs(bad.solution).sum() > 0.2


@pytest.mark.parametrize("clip", [None, 0.7])
@pytest.mark.parametrize("family", ["laplace", "gaussian"])
def test_per_example_bound_holds_outside_the_set(clip, family, data):
    """The sensitivity's per-example bound holds at points far outside C (momentum extrapolation)."""
    X, _ = data
    yr = X @ np.array([0.5, -0.5, 0.2, 0.1])
    problem = ERMProblem(SquaredLoss(), DataBounds(feature_norm=1.0, label_bound=1.0), L2Ball(D, 0.5))
    ctx = _setup(problem, X, yr, budget=Budget(1.0, 1e-5 if family == "gaussian" else 0.0), rng=0,
                 calibration="tight", options=GradientOptions(noise=family, clip=clip))  # fmt: skip
    bound = ctx.bound_l1 if family == "laplace" else ctx.bound_l2
    order = 1 if family == "laplace" else 2
    far = np.array([40.0, -40.0, 25.0, 10.0])  # ‖far‖ ≫ radius: the declared margin bound fails here
    norms = [np.linalg.norm(ctx.clipped_sum(far, np.array([i])), order) for i in range(X.shape[0])]
    assert max(norms) <= bound * (1 + 1e-9)
    # planted bug: without the enforcement the raw per-example gradient exceeds the declared bound
    z = X @ far
    raw = np.abs(problem.loss.derivative(z, yr)) * np.linalg.norm(X, order, axis=1)
    assert raw.max() > 2 * bound
