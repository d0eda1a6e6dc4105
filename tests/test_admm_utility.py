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
    (_, rows), = tables(recs)
    assert rows[0]["PP"] == 0.75 and rows[0]["DVP"] is None
    assert rows[0]["PP − local"] == 0.15 and rows[0]["central − PP"] == 0.15
