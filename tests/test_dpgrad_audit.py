"""Empirical audits (dpopt.audit) of DP-GDwS and DP-SGDwS on tiny neighbouring datasets."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from dpopt.accounting import Budget
from dpopt.audit import audit
from dpopt.exceptions import PrivacyClaimWarning
from dpopt.problems import DataBounds, ERMProblem
from dpopt.solvers.gradient import dp_gdws

PROB = ERMProblem("logistic", DataBounds(feature_norm=1.0), l2_penalty=0.02)
# replace-one neighbours: 20 identical records; in d1 the first record's label is flipped
X0 = np.ones((20, 1))
Y0 = np.ones(20)
Y1 = Y0.copy()
Y1[0] = -1.0


def _mechanism(eps, **kw):
    def run(data, rng):
        X, y = data
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", PrivacyClaimWarning)
            res = dp_gdws(PROB, X, y, budget=Budget(eps), rng=rng, step=0.5, **kw)
        return res.solution[0]

    return run


@pytest.mark.parametrize("batch_size", [None, 5])
def test_default_mode_not_refuted(batch_size):
    mech = _mechanism(1.0, iterations=2, smoothing=0.5, batch_size=batch_size)
    res = audit(mech, (X0, Y0), (X0, Y1), n_runs=2000, rng=0)
    assert not res.refutes(1.0)


def test_paper_mode_unsound_case_is_refuted():
    """Thesis DP-SGDwS, m = 1 of n = 20, T = 1, ε = 0.5: ε0 = nε/(2mT) = 5 and the first step is a
    full gradient (spec P6, P8): the claimed ε = 0.5 is refuted; the reported true ε is 5."""
    mech = _mechanism(0.5, iterations=1, smoothing=1.0, batch_size=1, calibration="paper")
    res = audit(mech, (X0, Y0), (X0, Y1), n_runs=2000, rng=0)
    assert res.refutes(0.5)
    with pytest.warns(PrivacyClaimWarning):
        out = dp_gdws(PROB, X0, Y0, budget=Budget(0.5), rng=0, iterations=1, smoothing=1.0, batch_size=1,
                      calibration="paper")  # fmt: skip
    assert out.privacy.true_epsilon == pytest.approx(5.0)
    assert res.epsilon_lower <= out.privacy.true_epsilon
