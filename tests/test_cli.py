"""Tests of the ``dpopt`` command line (through ``main`` and one ``python -m dpopt`` subprocess)."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from cli_checks import one_error_line  # tests/cli_checks.py
from dpopt.cli import main
from dpopt.experiments import registry


@dataclasses.dataclass(frozen=True)
class Cfg:
    n: int


def _run(cfg: Cfg, rng: np.random.Generator) -> Iterator[dict[str, Any]]:
    for i in range(cfg.n):
        yield {"i": i, "y": float(rng.normal())}


def _plot(records: Sequence[dict[str, Any]], out_dir: Path) -> list[Path]:
    from dpopt.experiments.plots import line_plot

    return [line_plot(records, x="i", y="y", path=out_dir / "cli-demo.png")]


def _experiment(name: str) -> registry.Experiment:
    return registry.Experiment(
        name=name,
        description=f"CLI demo {name}.\nMore text.",
        seed_doc="tests",
        run=_run,
        configs={"quick": Cfg(3), "paper": Cfg(4)},
        plot=_plot,
    )


@pytest.fixture
def demo() -> Iterator[str]:
    registry.register(_experiment("cli-demo"))
    yield "cli-demo"
    registry.unregister("cli-demo")


def test_list_shows_registered_names(demo: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "cli-demo" in out
    assert "CLI demo cli-demo." in out and "More text" not in out  # one-line description


def test_unknown_experiment_is_one_line_error(demo: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["reproduce", "cli-dem0"]) == 2
    line = one_error_line(capsys.readouterr().err)
    assert "unknown experiment 'cli-dem0'" in line and "did you mean 'cli-demo'" in line


@pytest.mark.parametrize(
    "argv",
    [
        ["reproduce", "cli-demo", "--scale", "huge"],
        ["reproduce", "cli-demo", "--seeds", "x"],
        ["reproduce", "cli-demo", "--seeds", "5-2"],
        ["reproduce", "cli-demo", "--seeds", "1", "1"],
        ["reproduce", "cli-demo", "--resume", "--overwrite"],
        ["reproduce", "cli-demo", "--set", "n"],
        ["reproduce", "cli-demo", "--set", "m=3"],
        ["reproduce", "cli-demo", "--set", "n=three"],
        ["report"],
        ["frobnicate"],
        [],
    ],
)
def test_bad_usage_exits_2_with_one_line(
    argv: list[str], demo: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*argv, "--out", str(tmp_path / "o")] if argv[:1] == ["reproduce"] else argv) == 2
    one_error_line(capsys.readouterr().err)
    assert not (tmp_path / "o").exists()  # checked before the run folder is created


def test_unwritable_out_dir(demo: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "plain-file"
    blocker.write_text("not a directory")
    assert main(["reproduce", "cli-demo", "--out", str(blocker / "run")]) == 2
    line = one_error_line(capsys.readouterr().err)
    assert "plain-file" in line
    assert main(["tour", "--out", str(blocker / "tour")]) == 2  # no tour experiment registered either way
    one_error_line(capsys.readouterr().err)


def test_reproduce_writes_records_figure_and_report(
    demo: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    assert main(["reproduce", "cli-demo", "--scale", "paper", "--seeds", "0-2", "5", "--out", str(out)]) == 0
    stdout = capsys.readouterr().out
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    assert sorted({r["seed"] for r in records}) == [0, 1, 2, 5]
    assert len(records) == 4 * 4
    assert (out / "cli-demo.png").stat().st_size > 1000
    assert "data:image/png;base64," in (out / "index.html").read_text()
    assert str(out / "records.jsonl") in stdout

    # Running again into the same directory needs --resume (which skips finished seeds).
    assert main(["reproduce", "cli-demo", "--scale", "paper", "--out", str(out)]) == 2
    assert "--resume" in one_error_line(capsys.readouterr().err)
    args = ["reproduce", "cli-demo", "--scale", "paper", "--seeds", "0,6", "--out", str(out), "--resume"]
    assert main(args) == 0
    assert "skipped seeds already completed: 0" in capsys.readouterr().out
    seeds = [json.loads(line)["seed"] for line in (out / "records.jsonl").read_text().splitlines()]
    assert sorted(set(seeds)) == [0, 1, 2, 5, 6] and len(seeds) == 5 * 4


@pytest.mark.parametrize("out", [None, "runs/demo", "./a/../b"])
def test_reproduce_from_a_working_folder_with_default_or_relative_out(
    out: str | None,
    demo: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # the README's form: a relative --out (or none) under the user's working folder; the plot
    # returns out_dir / "cli-demo.png", which used to be joined onto the relative folder twice
    monkeypatch.chdir(tmp_path)
    argv = ["reproduce", "cli-demo", "--no-progress"] + ([] if out is None else ["--out", out])
    assert main(argv) == 0, capsys.readouterr().err
    run = tmp_path / (out if out is not None else "dpopt-runs/cli-demo-quick")
    assert (run / "cli-demo.png").stat().st_size > 1000
    assert json.loads((run / "run.json").read_text())["figures"] == ["cli-demo.png"]
    assert "<img" in (run / "index.html").read_text() or "data:image/png" in (run / "index.html").read_text()
    printed = [line.removeprefix("figure: ") for line in capsys.readouterr().out.splitlines()]
    figures = [Path(p) for p in printed if p.endswith(".png")]
    assert len(figures) == 1 and figures[0].is_absolute()  # usable from any folder
    assert figures[0].resolve() == (run / "cli-demo.png").resolve()


@dataclasses.dataclass(frozen=True)
class _DataCfg:
    n: int = 2
    data_path: str = ""  # "" = built-in data
    dataset: str = "builtin"


def _check_data(cfg: _DataCfg) -> None:
    from dpopt.exceptions import InvalidParameterError

    if cfg.dataset != "builtin" and not cfg.dataset.startswith("csv:"):
        raise InvalidParameterError(f"--set dataset: unknown {cfg.dataset!r}; use 'builtin' or 'csv:PATH'")


def test_bad_settings_fail_before_anything_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    exp = dataclasses.replace(
        _experiment("cli-data"), configs={"quick": _DataCfg(), "paper": _DataCfg()}, check=_check_data
    )
    registry.register(exp)
    monkeypatch.chdir(tmp_path)
    try:
        for setting, expect in [
            ("data_path=missing/rows.csv", "missing/rows.csv does not exist"),
            ("dataset=csv:missing.csv", "missing.csv does not exist"),
            ("dataset=bogus", "unknown 'bogus'"),
        ]:
            assert main(["reproduce", "cli-data", "--set", setting, "--out", "run"]) == 2
            line = one_error_line(capsys.readouterr().err)
            assert expect in line and f"--set {setting.split('=')[0]}" in line
            assert list(tmp_path.iterdir()) == []  # no run folder: the corrected rerun needs no --overwrite
        (tmp_path / "rows.csv").write_text("1\n")
        assert (
            main(["reproduce", "cli-data", "--set", "data_path=rows.csv", "--out", "run", "--no-progress"])
            == 0
        )
        assert json.loads((tmp_path / "run" / "config.json").read_text())["config"]["data_path"] == "rows.csv"
    finally:
        registry.unregister("cli-data")


def test_set_overrides_the_configuration(
    demo: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    assert (
        main(["reproduce", "cli-demo", "--set", "n=5", "--out", str(out), "--no-report", "--no-progress"])
        == 0
    )
    assert len((out / "records.jsonl").read_text().splitlines()) == 5
    assert json.loads((out / "config.json").read_text())["config"] == {"n": 5}
    # resuming with a different setting is refused: the stored config no longer matches
    assert main(["reproduce", "cli-demo", "--set", "n=6", "--out", str(out), "--resume"]) == 2
    assert "differs" in one_error_line(capsys.readouterr().err)


@dataclasses.dataclass(frozen=True)
class _Many:
    flag: bool = False
    rate: float = 0.5
    names: tuple[str, ...] = ("a",)
    sizes: tuple[int, ...] = (1, 2)
    label: str = "x"
    limit: float | None = None


def test_override_config_parses_like_the_field() -> None:
    got = registry.override_config(
        _Many(),
        {
            "flag": "true",
            "rate": "1e-3",
            "names": "b, c",
            "sizes": "4,8",
            "label": "movielens:/d/r.dat",
            "limit": "none",
        },
    )
    assert got == _Many(True, 1e-3, ("b", "c"), (4, 8), "movielens:/d/r.dat", None)
    assert registry.override_config(_Many(), {"limit": "25"}).limit == 25
    assert registry.override_config(_Many(), {"sizes": (3,)}).sizes == (3,)  # non-strings used as given
    with pytest.raises(registry.InvalidParameterError, match="did you mean 'rate'"):
        registry.override_config(_Many(), {"rte": "1"})
    with pytest.raises(registry.InvalidParameterError, match="expected bool"):
        registry.override_config(_Many(), {"flag": "maybe"})
    assert registry.override_config(_Many(), {"label": "none"}).label == "none"  # not an optional field


def test_report_command(demo: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    runs = tmp_path / "runs"
    for scale in ("quick", "paper"):
        args = ["reproduce", "cli-demo", "--scale", scale, "--out", str(runs / scale), "--no-progress"]
        assert main([*args, "--no-report"]) == 0
    assert not (runs / "quick" / "index.html").exists()
    capsys.readouterr()
    assert main(["report", str(runs), "--open", "no"]) == 0
    index = runs / "index.html"
    assert str(index) in capsys.readouterr().out
    doc = index.read_text()
    assert doc.count("data:image/png;base64,") == 2 and "CLI demo cli-demo." in doc
    assert main(["report", str(tmp_path / "missing")]) == 2
    one_error_line(capsys.readouterr().err)
    assert main(["report", str(runs), "--open", "maybe"]) == 2


def test_tour_runs_tour_experiments_and_writes_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    registry.names()  # load the built-in modules first, so TOUR below is not extended under us
    registry.register(_experiment("tour-clidemo"))
    registry.register(_experiment("cli-extra"))
    monkeypatch.setattr(registry, "TOUR", ["cli-extra", "cli-not-registered"])
    try:
        out = tmp_path / "tour"
        assert main(["tour", "--out", str(out), "--no-progress"]) == 0
    finally:
        registry.unregister("tour-clidemo")
        registry.unregister("cli-extra")
    captured = capsys.readouterr()
    assert "cli-not-registered" in captured.err
    assert str(out / "index.html") in captured.out
    doc = (out / "index.html").read_text()
    assert "tour-clidemo" in doc and "cli-extra" in doc
    for name in ("tour-clidemo", "cli-extra"):
        cfg = json.loads((out / name / "config.json").read_text())
        assert (cfg["scale"], cfg["seeds"]) == ("quick", [0])


def test_python_m_dpopt_list() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "dpopt", "list"], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "experiments" in proc.stdout.lower()


def test_unknown_hamsi_dataset_fails_before_a_run_folder_exists(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["reproduce", "hamsi-table3.1", "--set", "dataset=movielens-1m", "--out", "r"]) == 2
    assert "unknown 'movielens-1m'" in one_error_line(capsys.readouterr().err)
    assert main(["reproduce", "hamsi-table3.1", "--set", "dataset=movielens:ml-1m/ratings.dat"]) == 2
    assert "ml-1m/ratings.dat does not exist" in one_error_line(capsys.readouterr().err)
    assert list(tmp_path.iterdir()) == []
