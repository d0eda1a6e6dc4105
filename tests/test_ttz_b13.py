"""The spec's E4-E7 reproductions for seed 002 (ttz-b13-*): data design and registration."""

from __future__ import annotations

import numpy as np

from dpopt.experiments import registry
from dpopt.experiments.ttz import reference
from dpopt.experiments.ttz_b13 import spiked_matrices, spiked_rows
from dpopt.problems import DataBounds, ERMProblem, L2Ball


def test_registered_with_both_scales() -> None:
    for name in ("ttz-b13-e4", "ttz-b13-e5", "ttz-b13-e6", "ttz-b13-e7"):
        exp = registry.get(name)
        assert set(exp.configs) >= {"quick", "paper"}


def test_spiked_rows_meet_the_declared_bounds() -> None:
    X, y = spiked_rows(500, 40, np.random.default_rng(0))
    assert np.allclose(np.linalg.norm(X, axis=1), 1.0) and np.abs(y).max() <= 1.0
    Xm, ym = spiked_matrices(300, 6, np.random.default_rng(1))
    assert Xm.shape == (300, 36) and np.allclose(np.linalg.norm(Xm, axis=1), 1.0)
    assert np.abs(ym).max() <= 1.0


def test_signal_does_not_vanish_with_p() -> None:
    """The point of the spiked design: the trivial output's excess stays O(1) as p grows."""
    rng = np.random.default_rng(2)
    excess = []
    for p in (10, 300):
        X, y = spiked_rows(2000, p, rng)
        prob = ERMProblem("squared", DataBounds(1.0, label_bound=1.0), L2Ball(p))
        excess.append(prob.objective(np.zeros(p), X, y) - reference(prob, X, y))
    assert min(excess) > 0.3 and abs(excess[0] - excess[1]) < 0.05
