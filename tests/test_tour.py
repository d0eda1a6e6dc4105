"""The tour experiment runs end to end at a tiny size and reports what it measured."""

from __future__ import annotations

from pathlib import Path

import pytest

from dpopt.cli import main
from dpopt.experiments.records import load_records
from dpopt.experiments.tour import TourConfig, plot, run, tables


def test_tour_records_and_plots(tmp_path: Path) -> None:
    import numpy as np

    cfg = TourConfig(n_runs=2_000, n_runs_selection=300, steps=(1, 10))
    records = list(run(cfg, np.random.default_rng(0)))
    audits = {r["mechanism"]: r for r in records if r["part"] == "audit"}
    assert all(r["refuted"] for name, r in audits.items() if name.startswith("BROKEN"))
    assert not any(r["refuted"] for name, r in audits.items() if not name.startswith("BROKEN"))
    noise = {(r["steps"], r["method"]): r["sigma"] for r in records if r["part"] == "noise"}
    # tight accounting needs less noise than per-step classic calibration once releases compose
    assert noise[(10, "tight: PLD")] < noise[(10, "tight: RDP")] < noise[(10, "classic, basic composition")]
    assert abs(noise[(1, "tight: PLD")] - 3.7306) < 1e-3
    figs = plot(records, tmp_path)
    assert all(f.exists() and f.stat().st_size > 1000 for f in figs)
    titles = [t for t, _ in tables(records)]
    assert titles == ["Privacy audit", "Per-release noise for a total budget"]


def test_tour_registered_and_runs_through_cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # a shrunken copy of the quick config, without the other tour experiments, keeps the CLI path
    # fast; the real 'dpopt tour' runs as the README says in tests/test_user_commands.py
    import dataclasses

    from dpopt.experiments import registry

    original = registry.get("tour-mechanisms")
    monkeypatch.setattr(registry, "TOUR", [])
    # steps=(1,): the PLD calibration for T > 1 composed releases takes seconds
    small = TourConfig(n_runs=1_000, n_runs_selection=200, steps=(1,))
    registry.register(dataclasses.replace(original, configs={"quick": small, "paper": small}), replace=True)
    try:
        assert "tour-mechanisms" in registry.tour_names()
        assert main(["tour", "--out", str(tmp_path), "--no-progress"]) == 0
    finally:
        registry.register(original, replace=True)
    html = (tmp_path / "index.html").read_text()
    assert "tour-mechanisms" in html and "<img" in html
    assert len(load_records(tmp_path / "tour-mechanisms")) > 0
