"""``dpopt ledger ...`` and ``--ledger/--dataset`` on ``dpopt answer`` and ``dpopt reproduce``.

Every test runs from a temporary working directory, so default and relative paths are exercised.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dpopt.cli import main
from dpopt.experiments import registry
from dpopt.ledger import Ledger


@pytest.fixture(autouse=True)
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DPOPT_LEDGER", raising=False)
    monkeypatch.setenv("DPOPT_LEDGER_ACTOR", "tester")
    return tmp_path


def _error(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dpopt: error: "), err
    return lines[0]


def test_init_add_show_with_the_default_path(capsys: pytest.CaptureFixture[str], in_tmp: Path) -> None:
    assert main(["ledger", "show"]) == 2
    assert "no ledger at dpopt-ledger.db" in _error(capsys)
    assert main(["ledger", "init"]) == 0
    assert (in_tmp / "dpopt-ledger.db").is_file()
    assert "ledger: dpopt-ledger.db (schema 1, 0 datasets)" in capsys.readouterr().out
    assert main(["ledger", "init"]) == 0  # idempotent
    capsys.readouterr()
    assert (
        main(
            [
                "ledger",
                "add-dataset",
                "survey",
                "--epsilon",
                "2",
                "--delta",
                "1e-6",
                "--neighbouring",
                "replace_one",
                "--description",
                "the 2026 survey",
            ]
        )
        == 0
    )
    assert (
        "dataset survey: budget (ε=2, δ=1e-06), replace_one neighbours, pld accountant"
        in capsys.readouterr().out
    )
    assert main(["ledger", "show"]) == 0
    out = capsys.readouterr().out
    assert "survey" in out and "ε=2 δ=1e-06" in out and "the 2026 survey" in out
    assert max(len(line) for line in out.splitlines()) <= 80


def test_relative_paths_urls_and_env(
    capsys: pytest.CaptureFixture[str], in_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (in_tmp / "sub").mkdir()
    assert main(["ledger", "init", "--ledger", "sub/team.db"]) == 0
    assert (in_tmp / "sub" / "team.db").is_file()
    assert main(["ledger", "add-dataset", "a", "--epsilon", "1", "--ledger", "sqlite:///sub/team.db"]) == 0
    monkeypatch.setenv("DPOPT_LEDGER", "sub/team.db")
    capsys.readouterr()
    assert main(["ledger", "show", "a"]) == 0
    assert "sub/team.db" in capsys.readouterr().out
    assert main(["ledger", "init", "--ledger", "missing-dir/x.db"]) == 2
    assert "cannot open the ledger missing-dir/x.db" in _error(capsys)


def test_bad_cli_input_gives_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ledger"]) == 2
    assert "subcommand is required" in _error(capsys)
    assert main(["ledger", "init"]) == 0
    capsys.readouterr()
    for argv, expected in [
        (["ledger", "add-dataset", "x", "--epsilon", "-1"], "epsilon"),
        (["ledger", "add-dataset", "x y", "--epsilon", "1"], "dataset name"),
        (["ledger", "add-dataset", "x", "--epsilon", "1", "--accountant", "magic"], "invalid choice"),
        (["ledger", "history", "nope"], "no dataset 'nope'"),
        (["ledger", "show", "--ledger", "postgresql://u@127.0.0.1:1/none"], "ledger"),
    ]:
        assert main(argv) == 2, argv
        assert expected in _error(capsys), argv
    Path("junk.db").write_text("not a database")
    assert main(["ledger", "show", "--ledger", "junk.db"]) == 2
    assert "not a dpopt ledger" in _error(capsys)


def _histogram() -> None:
    np.savetxt("counts.txt", np.arange(16))


def test_answer_charges_the_dataset_and_is_refused_when_over(capsys: pytest.CaptureFixture[str]) -> None:
    _histogram()
    assert main(["ledger", "init"]) == 0
    assert main(["ledger", "add-dataset", "counts", "--epsilon", "1", "--delta", "1e-6"]) == 0
    base = [
        "answer",
        "prefix:n=16",
        "counts.txt",
        "--delta",
        "1e-7",
        "--seed",
        "1",
        "--ledger",
        "dpopt-ledger.db",
        "--dataset",
        "counts",
    ]
    assert main([*base, "--epsilon", "0.5", "--out", "a1.csv"]) == 0
    assert "ledger: 1 release(s) recorded on dataset counts (seq 1, adding ε=0.444" in capsys.readouterr().out
    assert main([*base, "--epsilon", "0.5", "--out", "a2.csv"]) == 0
    capsys.readouterr()
    assert main([*base, "--epsilon", "0.9", "--out", "a3.csv"]) == 2
    assert "dataset 'counts'" in _error(capsys) and not Path("a3.csv").exists()
    releases = Ledger("dpopt-ledger.db").history("counts")
    assert [r.note for r in releases] == ["dpopt answer prefix:n=16"] * 2
    assert [r.actor for r in releases] == ["tester"] * 2
    assert main(["ledger", "history", "counts"]) == 0
    out = capsys.readouterr().out
    assert "2 release(s)" in out and "tester" in out and "Gaussian" in out
    assert max(len(line) for line in out.splitlines()) <= 80
    # the relation must match the dataset's; one of --ledger/--dataset alone is an error
    assert main([*base, "--epsilon", "0.1", "--out", "a4.csv", "--neighbouring", "replace_one"]) == 2
    assert "--neighbouring add_remove" in _error(capsys)
    assert (
        main(
            [
                "answer",
                "prefix:n=16",
                "counts.txt",
                "--epsilon",
                "0.1",
                "--delta",
                "1e-7",
                "--dataset",
                "counts",
                "--out",
                "a5.csv",
            ]
        )
        == 2
    )
    assert "--ledger URL and --dataset NAME go together" in _error(capsys)
    assert len(Ledger("dpopt-ledger.db").history("counts")) == 2


@dataclasses.dataclass(frozen=True)
class _Cfg:
    n: int


def _private_run(cfg: _Cfg, rng: np.random.Generator) -> Iterator[dict[str, Any]]:
    from dpopt.mechanisms import LaplaceMechanism

    for i in range(cfg.n):  # releases made without accountant=: charged through dpopt.accounting.charging
        yield {"i": i, "y": float(LaplaceMechanism.calibrate(0.1).release(1.0, rng=rng))}


def _plot(records: Sequence[dict[str, Any]], out_dir: Path) -> list[Path]:
    return []


@pytest.fixture
def private_demo() -> Iterator[str]:
    registry.register(
        registry.Experiment(
            name="ledger-demo",
            description="Ledger demo.",
            seed_doc="tests",
            run=_private_run,
            configs={"quick": _Cfg(3), "paper": _Cfg(30)},
            plot=_plot,
        )
    )
    yield "ledger-demo"
    registry.unregister("ledger-demo")


def test_reproduce_charges_every_release(private_demo: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ledger", "init", "--ledger", "sqlite:///l.db"]) == 0
    assert main(["ledger", "add-dataset", "demo", "--epsilon", "0.5", "--ledger", "l.db"]) == 0
    argv = [
        "reproduce",
        private_demo,
        "--no-progress",
        "--no-report",
        "--ledger",
        "l.db",
        "--dataset",
        "demo",
    ]
    assert main([*argv, "--out", "run1"]) == 0
    out = capsys.readouterr().out
    assert "ledger: 3 release(s) recorded on dataset demo (seq 1-3, adding ε=0.3)" in out
    assert "ε=0.2 left" in out
    assert main([*argv, "--out", "run2"]) == 2  # 0.3 + 0.3 > 0.5: refused at the 3rd release
    assert "dataset 'demo'" in _error(capsys)
    led = Ledger("l.db")
    assert len(led.history("demo")) == 5 and led.spent("demo").epsilon == pytest.approx(0.5)
    assert all(r.note == f"dpopt reproduce {private_demo}" for r in led.history("demo"))
    assert main(["ledger", "export", "--out", "ledger.json", "--ledger", "l.db"]) == 0
    data = json.loads(Path("ledger.json").read_text())
    assert data["datasets"][0]["name"] == "demo" and len(data["datasets"][0]["releases"]) == 5
    capsys.readouterr()
    assert main(["ledger", "export", "demo", "--ledger", "l.db"]) == 0
    assert json.loads(capsys.readouterr().out)["datasets"][0]["spent"]["n_events"] == 5


def test_a_failed_export_names_the_users_file(capsys: pytest.CaptureFixture[str], in_tmp: Path) -> None:
    assert main(["ledger", "init"]) == 0
    capsys.readouterr()
    assert main(["ledger", "export", "--out", "missing-dir/ledger.json"]) == 2
    line = _error(capsys)
    assert "--out missing-dir/ledger.json" in line and "partial" not in line
    assert main(["ledger", "export", "--out", "ledger.json"]) == 0
    capsys.readouterr()
    real_replace = os.replace

    def refuse(src: Any, dst: Any) -> None:  # the final rename fails (a file system error)
        raise PermissionError(13, "Permission denied", str(dst))

    import dpopt.cli_ledger

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(dpopt.cli_ledger.os, "replace", refuse)
        assert main(["ledger", "export", "--out", "out.json"]) == 2
    line = _error(capsys)
    assert "--out out.json: cannot write (Permission denied)" in line and "partial" not in line
    assert not [p for p in in_tmp.iterdir() if p.name.endswith(".partial")]  # no temporary file left
    assert os.replace is real_replace
