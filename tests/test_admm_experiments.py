"""The seed-004 reproductions (admm-fig1 … admm-fig4) run end to end at a tiny size."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from dpopt.exceptions import InvalidParameterError
from dpopt.experiments import admm as admm_exp
from dpopt.experiments import registry


def test_registered_with_quick_and_paper_configs() -> None:
    for name in ("admm-fig1", "admm-fig2", "admm-fig3", "admm-fig4"):
        exp = registry.get(name)
        assert exp.config("quick") is not None and exp.config("paper") is not None
    # the tour shows the public schedule (tour-admm); the paper's figure stays a reproduction
    assert "tour-admm" in registry.TOUR and "admm-fig2" not in registry.TOUR


def test_tour_admm_tiny(tmp_path: Path) -> None:
    """The tour panel at a tiny size: both private runs spend exactly ε, the noise-free curve falls."""
    exp = registry.get("tour-admm")
    cfg = dataclasses.replace(exp.config("quick"), rows_per_node=300, held_out_rows=500, n_rounds=4)
    recs = list(admm_exp.run_tour_admm(cfg, np.random.default_rng(0)))
    assert {r["method"] for r in recs} == {"PP", "DVP", "M-ADMM"} and len(recs) == 12
    for m in ("PP", "DVP"):
        last = [r for r in recs if r["method"] == m][-1]
        assert last["privacy_bound"] == pytest.approx(cfg.epsilon, rel=1e-6)
    plain = [r["held_out_loss"] for r in recs if r["method"] == "M-ADMM"]
    assert plain[-1] < plain[0]
    assert exp.plot is not None and exp.tables is not None
    assert all(p.exists() for p in exp.plot(recs, tmp_path))
    ((_t, rows),) = exp.tables(recs)
    assert [r["method"] for r in rows] == ["PP", "DVP", "M-ADMM"]


def test_fig1_and_fig4_tiny(tmp_path: Path) -> None:
    tiny = admm_exp.SplitConfig(rows_per_node=60)
    cfg1 = admm_exp.Fig1Config(setup=tiny, n_rounds=4, q1_values=(1.0, 1.1))
    recs = list(admm_exp.run_fig1(cfg1, np.random.default_rng(0)))
    assert {r["panel"] for r in recs} == {"a", "b"}
    assert all(np.isinf(r["privacy_bound"]) for r in recs)
    plot1 = registry.get("admm-fig1").plot
    assert plot1 is not None and plot1(recs, tmp_path)[0].exists()

    uneven = admm_exp.SplitConfig(n_nodes=8, edge_prob=0.5, rows_per_node=40, split="dirichlet", min_rows=15)
    cfg = dataclasses.replace(registry.get("admm-fig4").config("quick"), setup=uneven, n_rounds=3)
    recs = list(admm_exp.run_pp(cfg, np.random.default_rng(0)))
    last = [r for r in recs if r["round"] == 3]
    pp = [r["privacy_bound"] for r in last if r["method"] == "PP"]
    dvp = [r["privacy_bound"] for r in last if r["method"] == "DVP"]
    assert max(pp) < min(dvp)  # increasing penalties lower the bound
    exp4 = registry.get("admm-fig4")
    assert exp4.plot is not None and exp4.tables is not None
    paths = exp4.plot(recs, tmp_path)
    assert all(p.exists() and p.stat().st_size > 1000 for p in paths)
    ((_title, rows),) = exp4.tables(recs)
    assert len(rows) == 4 and all(r["T"] == 3 for r in rows)


def test_curves_from_set_and_paper_calibration() -> None:
    """``--set curves=PP:q1:q2,...`` selects curves; inexact_fraction=0 is the paper's bound (1/1.01 of the default)."""
    exp = registry.get("admm-fig2")
    base = registry.override_config(
        exp.config("quick"), {"curves": "PP:1.1:1.05,dvp:1:1", "n_rounds": "2", "alphas": "3"}
    )
    tiny = dataclasses.replace(base, setup=admm_exp.SplitConfig(rows_per_node=40))
    assert admm_exp._curves(tiny) == [("PP", 1.1, 1.05), ("DVP", 1.0, 1.0)]
    sound = list(admm_exp.run_pp(tiny, np.random.default_rng(0)))
    paper = list(admm_exp.run_pp(dataclasses.replace(tiny, inexact_fraction=0.0), np.random.default_rng(0)))
    assert {r["curve"] for r in sound} == {"PP q1=1.1 q2=1.05", "DVP q1=1 q2=1"}
    for s, p in zip(sound, paper, strict=True):
        assert s["inexact_fraction"] == 0.01 and p["inexact_fraction"] == 0.0
        assert np.isclose(s["privacy_bound"], 1.01 * p["privacy_bound"])
    bad = dataclasses.replace(tiny, curves=(("XX:1:1",),))
    with pytest.raises(InvalidParameterError):
        admm_exp._curves(bad)
