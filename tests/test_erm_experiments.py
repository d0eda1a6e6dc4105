"""The seed-002 reproductions (ttz-e*) are registered and run at quick scale through the runner."""

from __future__ import annotations

import math

import numpy as np
import pytest

import dpopt.experiments.ttz as ttz
from dpopt.experiments import get, load_records, run_experiment


def test_ttz_experiments_registered():
    for name in ("ttz-e1", "ttz-e2", "ttz-e3", "ttz-e4", "ttz-e5"):
        exp = get(name)
        assert exp.seed_doc.startswith("Talwar, Thakurta & Zhang")
        assert exp.plot is not None and exp.tables is not None


def test_fit_slope_recovers_a_power_law():
    rng = np.random.default_rng(0)
    recs = [
        {"n": n, "excess": 3.0 * n ** (-2 / 3) * math.exp(0.01 * rng.normal())}
        for n in (1e3, 1e4, 1e5)
        for _ in range(3)
    ]
    fit = ttz.fit_slope(recs, "n")
    assert abs(fit["slope"] + 2 / 3) < 0.02 and fit["ci_low"] < -2 / 3 < fit["ci_high"]


def test_ttz_e4_runs_quick_through_the_runner(tmp_path):
    res = run_experiment("ttz-e4", scale="quick", seeds=(0,), out_dir=tmp_path, progress=False)
    records = load_records(res.records_path)
    assert res.figures and all(p.exists() for p in res.figures)
    tight = [r for r in records if r["calibration"] == "tight"]
    assert tight and all(r["true_epsilon"] <= r["target_epsilon"] * (1 + 1e-9) for r in tight)
    # the paper's Noise-MD calibration is sound but adds far more noise than the tight one
    md = {
        r["calibration"]: r
        for r in records
        if r["solver"].startswith("noise-MD") and r["target_epsilon"] == 1.0
    }
    assert md["paper"]["noise"] > 5 * md["tight"]["noise"]
    titles = [t for t, _ in get("ttz-e4").tables(records)]  # type: ignore[misc]
    assert titles


@pytest.mark.slow
@pytest.mark.parametrize("name", ["ttz-e1", "ttz-e2", "ttz-e3", "ttz-e5"])
def test_other_ttz_experiments_run_quick(tmp_path, name):
    res = run_experiment(name, scale="quick", seeds=(0,), out_dir=tmp_path, progress=False)
    assert res.n_records > 0 and res.figures
