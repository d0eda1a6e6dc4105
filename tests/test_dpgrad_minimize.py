"""The DP gradient methods are reachable through the minimize() front door."""

from __future__ import annotations

import numpy as np
import pytest

from dpopt.accounting import Budget
from dpopt.datasets import make_logistic
from dpopt.problems import DataBounds, ERMProblem, LogisticLoss
from dpopt.solvers import available_methods, dp_gd, minimize


def test_gradient_methods_registered() -> None:
    names = set(available_methods())
    assert {"dp_gd", "dp_sgd", "dp_gdws", "dp_mag", "dp_smag", "dp_masg", "dp_online_gdws"} <= names


def test_minimize_dispatches_to_dp_gd() -> None:
    data = make_logistic(500, 5, rng=0)
    problem = ERMProblem(LogisticLoss(), DataBounds(feature_norm=1.0), l2_penalty=0.01)
    via_front = minimize(
        problem, data.X, data.y, method="dp_gd", budget=Budget(1.0, 1e-5), rng=3, max_iter=50
    )
    direct = dp_gd(problem, data.X, data.y, budget=Budget(1.0, 1e-5), rng=3, iterations=50)
    assert np.array_equal(via_front.solution, direct.solution)
    assert via_front.privacy.epsilon <= 1.0 + 1e-9
    assert via_front.privacy.epsilon == pytest.approx(direct.privacy.epsilon)
