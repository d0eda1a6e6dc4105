"""The COA reproductions run end to end at quick scale through the experiments runner."""

from __future__ import annotations

import math

import pytest

import dpopt.experiments.coa  # noqa: F401  (registers the coa-* experiments)
from dpopt.experiments import get, load_records, run_experiment

NAMES = ["coa-fig1", "coa-fig2", "coa-fig6", "coa-fig10", "coa-fig11", "coa-fig12"]


@pytest.mark.parametrize("name", NAMES)
def test_quick_reproduction_runs(name, tmp_path):
    result = run_experiment(name, scale="quick", seeds=(0,), out_dir=tmp_path, progress=False)
    assert result.n_records > 0
    assert result.figures and all(p.exists() for p in result.figures)
    records = load_records(result.records_path)
    assert get(name).config("paper") is not None
    if name == "coa-fig1":
        for method in ("COA-paper", "COA (dpopt default)"):
            rows = [r for r in records if r["method"] == method]
            assert rows and all(r["relative_excess"] >= -1e-9 for r in rows)
        return
    coa = [r for r in records if r["mechanism"] == "COA"]
    assert coa and all(r["gap"] <= 1e-4 + 1e-12 for r in coa)
    bounds = {
        (r["workload"], r["n"], r["m"], r["rank_ratio"]): r["expected_error"]
        for r in records
        if r["mechanism"] == "lower bound"
    }
    for r in records:
        key = (r["workload"], r["n"], r["m"], r["rank_ratio"])
        if r["mechanism"] != "lower bound" and key in bounds:
            assert r["expected_error"] >= bounds[key] * (1 - 1e-9)
        if "empirical_error" in r:
            assert math.isfinite(r["empirical_error"]) and r["empirical_error"] >= 0
