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
        assert registry.tour_names()[0] == "tour-mechanisms"  # the audit leads, before e.g. tour-admm
        assert main(["tour", "--out", str(tmp_path), "--no-progress"]) == 0
    finally:
        registry.register(original, replace=True)
    html = (tmp_path / "index.html").read_text()
    assert "tour-mechanisms" in html and "<img" in html
    assert "1. tour-mechanisms" in html  # the report opens with the audit
    assert len(load_records(tmp_path / "tour-mechanisms")) > 0


def test_tour_report_reads_as_a_report(tmp_path: Path) -> None:
    """Issue 15 §3 without a browser: intro, audit first, settings used, '1 seed (seed 0)', no
    single-seed spread columns, no absolute local paths, files readable by everyone (0644)."""
    import dataclasses
    import re
    import stat

    from dpopt.experiments import registry
    from dpopt.experiments.report import write_report
    from dpopt.experiments.runner import run_experiment
    from dpopt.experiments.tour import INTRO

    original = registry.get("tour-mechanisms")
    small = TourConfig(n_runs=1_000, n_runs_selection=200, steps=(1,))
    registry.register(dataclasses.replace(original, configs={"quick": small, "paper": small}), replace=True)
    try:
        run = run_experiment(
            "tour-mechanisms", seeds=(0,), out_dir=tmp_path / "tour-mechanisms", progress=False
        )
    finally:
        registry.register(original, replace=True)
    report = write_report(tmp_path, title="dpopt tour", intro=INTRO)
    doc = report.read_text()
    text = re.sub(r"<[^>]+>", " ", re.sub(r'src="data:[^"]+"', "", doc))
    assert INTRO.split(":")[0].replace("'", "&#x27;") in doc
    assert '<nav class="toc">' in doc and text.index("Contents") < text.index("1. tour-mechanisms")
    assert "1 seed (seed 0)" in text and "seeds:" not in text
    assert "Settings actually used, quick scale" in text and "n_runs = 1000" in text
    assert str(tmp_path) not in doc and "/tmp/" not in text  # paths are relative to the report
    for f in [report, *run.figures, run.out_dir / "config.json", run.out_dir / "run.json"]:
        mode = stat.S_IMODE(f.stat().st_mode)
        assert mode & 0o044 == 0o044, f"{f.name} is not readable by everyone ({oct(mode)})"


def test_report_drops_spread_columns_only_when_they_hold_no_spread() -> None:
    from dpopt.experiments.report import _table

    single = [{"method": "a", "error": 1.5, "spread (std)": 0.0, "reps": 1}]
    html = _table(single)
    assert "spread" not in html and "reps" not in html and "error" in html
    repeated = [{"method": "a", "error": 1.5, "spread (std)": 0.2, "reps": 3}]
    assert "spread (std)" in _table(repeated) and "reps" in _table(repeated)
