"""The COA reproductions run at quick scale: two end to end through the runner (records and
figures), the others by calling their ``run`` directly (records only)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pytest

import dpopt.experiments.coa  # noqa: F401  (registers the coa-* experiments)
from dpopt.experiments import get, load_records, run_experiment


def _check_sweep(records: Sequence[Mapping[str, Any]]) -> None:
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


def test_quick_reproduction_end_to_end(tmp_path):
    result = run_experiment("coa-fig2", scale="quick", seeds=(0,), out_dir=tmp_path, progress=False)
    assert result.n_records > 0
    assert result.figures and all(p.exists() for p in result.figures)
    records = load_records(result.records_path)
    _check_sweep(records)
    assert get("coa-fig2").tables is not None and get("coa-fig2").tables(records)  # type: ignore[misc]


def test_convergence_records():
    exp = get("coa-fig1")
    records = list(exp.run(exp.config("quick"), np.random.default_rng(0)))
    for method in ("COA-paper", "COA (dpopt default)"):
        rows = [r for r in records if r["method"] == method]
        assert rows and all(r["relative_excess"] >= -1e-9 for r in rows)
    for workload in {r["workload"] for r in records}:
        final = {
            r["method"]: r["relative_excess"] for r in records if r["workload"] == workload
        }  # last record per method = final iterate
        assert final["COA (dpopt default)"] <= final["COA-paper"] + 1e-4


@pytest.mark.parametrize("name", ["coa-fig6", "coa-fig10", "coa-fig11", "coa-fig12"])
def test_quick_sweeps_records(name):
    exp = get(name)
    assert exp.config("paper") is not None
    records = list(exp.run(exp.config("quick"), np.random.default_rng(0)))
    assert records
    _check_sweep(records)
