"""The admm-utility experiment's configuration checks and table (the run itself: tests/contracts)."""

from __future__ import annotations

import pytest

from dpopt.exceptions import InvalidParameterError
from dpopt.experiments import registry
from dpopt.experiments.admm_utility import tables


def test_bad_settings_refused_before_running() -> None:
    exp = registry.get("admm-utility")
    with pytest.raises(InvalidParameterError, match="splits"):
        exp.config("quick", {"splits": "even,power"})
    with pytest.raises(InvalidParameterError, match="epsilons"):
        exp.config("quick", {"epsilons": "0,1"})
    with pytest.raises(InvalidParameterError, match="n_sites"):
        exp.config("quick", {"n_sites": "1"})


def test_table_gaps_from_records() -> None:
    base = {"n_sites": 5, "split": "even", "epsilon": 1.0}
    recs = [
        {**base, "method": "PP", "test_accuracy": 0.8},
        {**base, "method": "PP", "test_accuracy": 0.7},
        {**base, "method": "local", "test_accuracy": 0.6},
        {**base, "method": "central", "test_accuracy": 0.9},
        {**base, "method": "DVP", "test_accuracy": None, "note": "refused"},
    ]
    ((_, rows),) = tables(recs)
    assert rows[0]["PP"] == 0.75 and rows[0]["DVP"] is None
    assert rows[0]["PP − local"] == 0.15 and rows[0]["central − PP"] == 0.15


def test_public_plan_is_one_weighted_round_and_session2_settings_still_available() -> None:
    import numpy as np

    from dpopt.experiments.admm_utility import UtilityConfig, _plan

    degrees, sizes = np.array([2, 3, 3, 1, 1]), np.array([10338, 236, 2267, 4826, 12495])
    kw, start, weights = _plan(UtilityConfig(), degrees, sizes, 1.0, "PP")
    assert kw["max_iter"] == 1 and start == 1 and "noise_rate" in kw
    assert weights is not None and np.allclose(weights, sizes / sizes.sum())
    # the noise-free reference gets the same penalties and no noise rate
    kw_m, _, _ = _plan(UtilityConfig(), degrees, sizes, 1.0, "M-ADMM")
    assert "noise_rate" not in kw_m and np.array_equal(kw_m["penalty"], kw["penalty"])
    old = UtilityConfig(
        public_rounds=5, min_noise_rate=5.0, per_site_noise=False, weighted=False, progress=1.0
    )
    kw_o, start_o, weights_o = _plan(old, degrees, sizes, 1.0, "PP")
    assert kw_o["max_iter"] == 5 and start_o == 3 and weights_o is None and "noise_rate" not in kw_o
    assert isinstance(kw_o["theta"], float)
