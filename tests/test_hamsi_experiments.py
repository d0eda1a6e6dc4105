"""HAMSI reproductions: registration, records, tables and plots (on small synthetic data)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from dpopt.experiments import hamsi as exp
from dpopt.experiments.registry import TOUR, get


def test_experiments_are_registered_with_both_scales() -> None:
    for name in (
        "hamsi-fig3.3",
        "hamsi-table3.1",
        "hamsi-fig3.5",
        "hamsi-fig3.6",
        "hamsi-fig3.7",
        "hamsi-heldout",
    ):
        e = get(name)
        assert set(e.configs) >= {"quick", "paper"}
    assert "hamsi-fig3.5" in TOUR


def test_dataset_fallback_and_errors() -> None:
    r, label = exp.load_dataset("synthetic", np.random.default_rng(0))
    assert r.shape == exp.ML100K_SHAPE and label == "synthetic"
    with pytest.raises(ValueError, match="dataset"):
        exp.load_dataset("netflix", np.random.default_rng(0))


def test_runs_records_tables_and_plots(tmp_path: Path) -> None:
    cfg = exp.RunConfig(
        dataset="synthetic",
        rank=5,
        schemes=("strata-b", "hogwild"),
        schedules=("det",),
        threads=(1,),
        n_subsets=3,
        time_budget=None,
        max_epochs=8,
        curves=True,
        test_fraction=0.2,
    )
    records = [r | {"repetition": 0, "seed": 0} for r in exp._runs(cfg, np.random.default_rng(0))]
    finals = [r for r in records if r.get("final")]
    assert len(finals) == 2 * 2  # schemes x algorithms
    for r in finals:
        assert r["epochs"] == 8 and np.isfinite(r["rmse"]) and r["test_rmse"] is not None
        assert r["dataset"] == "synthetic"
    hamsi_rmse = {r["scheme"]: r["rmse"] for r in finals if r["algorithm"] == "hamsi"}
    mbgd_rmse = {r["scheme"]: r["rmse"] for r in finals if r["algorithm"] == "mbgd"}
    assert hamsi_rmse["strata-b"] < mbgd_rmse["strata-b"], (hamsi_rmse, mbgd_rmse)
    tables = exp._table31(records)
    assert tables[0][1] and "strata-b" in tables[0][1][0]
    assert exp._split_table(records)[0][1]
    paths = exp._plot_curves("algorithm", "curves", "t")(records, tmp_path)
    paths += exp._plot_split(records, tmp_path)
    assert all(p.is_file() and p.stat().st_size > 0 for p in paths)


def test_balance_records(tmp_path: Path) -> None:
    cfg = exp.BalanceConfig(dataset="synthetic", n_subsets=4, n_strata=4)
    records = [r | {"repetition": 0} for r in exp._balance(cfg, np.random.default_rng(1))]
    assert {r["figure"] for r in records} == {"3.3", "3.4"}
    total = sum(r["n_functions"] for r in records if r["figure"] == "3.4" and r["scheme"] == "strata-b")
    assert total == exp.ML100K_RATINGS
    (_, colour_rows), (_, rows) = exp._balance_table(records)
    assert len(colour_rows) == 2
    assert len(rows) == 8
    assert all(p.is_file() for p in exp._plot_balance(records, tmp_path))


def test_variants_run_hamsi_both_ways_and_tables_flag_divergence() -> None:
    cfg = exp.RunConfig(
        dataset="synthetic",
        rank=4,
        schemes=("strata-b",),
        schedules=("det",),
        threads=(1,),
        time_budget=None,
        max_epochs=3,
        variants=("reference", "dpopt"),
    )
    finals = [r | {"repetition": 0} for r in exp._runs(cfg, np.random.default_rng(0)) if r.get("final")]
    assert sorted((r["algorithm"], r["variant"]) for r in finals) == [
        ("hamsi", "dpopt"),
        ("hamsi", "reference"),
        ("mbgd", "reference"),  # mb-GD has no HAMSI settings: run once
    ]
    # a diverged run is flagged in the table, not averaged silently
    flagged = [dict(r, status="diverged") if r["variant"] == "dpopt" else r for r in finals]
    rows = {(r["algorithm"], r["variant"]): r for r in exp._table31(flagged)[0][1]}
    assert rows[("hamsi", "dpopt")]["strata-b"].endswith("(1/1 diverged)")
    assert isinstance(rows[("hamsi", "reference")]["strata-b"], float)
    with pytest.raises(ValueError, match="variants"):
        list(exp._runs(exp.RunConfig(variants=("fast",)), np.random.default_rng(0)))
