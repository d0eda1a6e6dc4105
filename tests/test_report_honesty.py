"""The tour's report says what its runs did: the data they used (a synthetic stand-in when the public
set is absent), their own sizes, and no internal jargon."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest

from dpopt.experiments import registry
from dpopt.experiments.data import stand_in
from dpopt.experiments.report import write_report
from dpopt.experiments.runner import run_experiment
from dpopt.experiments.tour import INTRO
from report_checks import PUBLIC, jargon_in, visible_text  # tests/report_checks.py

# the two tour runs that read public data, shrunk (their code paths, not their sizes, matter here)
SMALL = {
    "tour-admm": {"rows_per_node": "200", "held_out_rows": "400", "n_rounds": "3"},
    "hamsi-fig3.5": {"time_budget": "0.2", "rank": "4", "n_subsets": "4"},
}


def tour_report(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, datasets: Path) -> str:
    tmp_path.mkdir(exist_ok=True)
    monkeypatch.setenv("DPOPT_DATASETS", str(datasets))
    monkeypatch.chdir(tmp_path)  # the source tree's neighbours are not looked in: DPOPT_DATASETS is set
    for name, overrides in SMALL.items():
        run_experiment(name, out_dir=tmp_path / name, progress=False, overrides=overrides)
    return visible_text(write_report(tmp_path, title="dpopt tour", intro=INTRO).read_text())


def test_without_the_public_data_the_report_names_only_the_stand_ins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    empty = tmp_path / "no-datasets"
    empty.mkdir()
    text = tour_report(tmp_path / "runs", monkeypatch, empty)
    # every mention of a public set says it was not found (the warning, the data line, the setting)
    for m in PUBLIC.finditer(text):
        assert "not found" in text[m.end() : m.end() + 160], (
            f"names {m.group(0)!r}: {text[m.start() - 80 : m.end() + 160]}"
        )
    assert "Private ADMM on 5 sites holding synthetic data" in text
    assert "data: synthetic stand-in for UCI Adult (not found)" in text
    assert "data: synthetic stand-in for MovieLens 100K (not found)" in text
    assert "dataset = movielens-100k (MovieLens 100K not found: a synthetic stand-in was used)" in text
    assert text.count("so this run used a synthetic stand-in") == 2
    # the description states this run's sizes, not the quick scale's (1,000 rows) nor the paper's
    assert "5 data owners (200 rows each)" in text and "on 400 held-out rows" in text
    assert "1,000 rows" not in text and "1000 rows" not in text
    assert jargon_in(text) == []


def test_with_the_public_data_the_report_names_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shared_datasets: Path
) -> None:
    text = tour_report(tmp_path, monkeypatch, shared_datasets)
    assert "Private ADMM on 5 sites holding UCI Adult" in text
    assert "data: UCI Adult" in text and "data: MovieLens 100K" in text
    assert "RMSE vs wall-clock time (0.2 s per run) on MovieLens 100K, rank 4" in text
    assert "stand-in" not in text and "not found" not in text
    assert jargon_in(text) == []


def test_descriptions_state_the_run_sizes_and_cite_papers() -> None:
    coa = registry.get("coa-fig2")
    quick = coa.describe(coa.config("quick"))
    assert "m = 64 queries" in quick and "1024" not in quick  # the quick run's m, not the paper's
    assert "m = 1024 (quick: 64) queries" in coa.description  # `dpopt list`: both
    assert coa.seed_doc.startswith("Yuan, Yang, Zhang & Hao")
    for exp in registry.all_experiments():
        for text in (exp.description, exp.describe(exp.configs["quick"]), exp.seed_doc):
            assert jargon_in(text) == [], f"{exp.name}: {jargon_in(text)} in {text!r}"
            assert not registry.placeholders(text) - {"data"}, f"{exp.name}: unfilled {text!r}"


def test_placeholders_are_checked_when_an_experiment_is_made() -> None:
    from dpopt.exceptions import InvalidParameterError

    demo = registry.get("coa-fig2")
    with pytest.raises(InvalidParameterError, match=r"\{nodes\}"):
        dataclasses.replace(demo, description="error vs n, {nodes} nodes", description_template="")
    with pytest.raises(InvalidParameterError, match="give data="):
        dataclasses.replace(demo, description="error on {data}", description_template="")
    changed = dataclasses.replace(demo, plot=None)  # the template survives a replace
    assert changed.description_template == demo.description_template
    assert changed.description == demo.description


@dataclasses.dataclass(frozen=True)
class _Cfg:
    n: int = 3
    dataset: str = "adult"


def _stand_in_run(cfg: _Cfg, rng: object) -> Iterator[dict[str, object]]:
    for i in range(cfg.n):
        yield {"dataset": stand_in("UCI Adult"), "i": i}


def test_report_fills_the_description_from_the_run(tmp_path: Path) -> None:
    """Fast and self-contained: settings from the run's config, data from its records."""
    exp = registry.Experiment(
        name="test-honest",
        description="Error on {data}, n = {n}.",
        data="UCI Adult",
        seed_doc="tests",
        run=_stand_in_run,
        configs={"quick": _Cfg(), "paper": _Cfg(n=100)},
    )
    assert exp.description == "Error on UCI Adult, n = 100 (quick: 3)."  # what `dpopt list` shows
    registry.register(exp)
    try:
        run_experiment("test-honest", out_dir=tmp_path / "run", progress=False, overrides={"n": 2})
        text = visible_text(write_report(tmp_path).read_text())
    finally:
        registry.unregister("test-honest")
    assert "Error on synthetic data, n = 2." in text
    assert "UCI Adult (adult/adult.data) was not found" in text
    assert "dataset = adult (UCI Adult not found: a synthetic stand-in was used)" in text
    for m in PUBLIC.finditer(text):
        assert "not found" in text[m.end() : m.end() + 160], text[m.start() - 80 : m.end() + 160]
