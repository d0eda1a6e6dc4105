"""``dpopt list``: one line per experiment at 80 columns; ``--long`` adds the descriptions."""

from __future__ import annotations

from pathlib import Path

import pytest

from dpopt.cli import main
from dpopt.experiments import registry


def test_list_is_one_line_per_experiment_within_80_columns(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    names = registry.names()
    assert all(len(line) <= 80 for line in lines), max(lines, key=len)
    listed = [line.split()[0] for line in lines if line.startswith("  ")]
    assert listed == list(names)
    assert "dpopt list --long" in lines[0] and lines[-1].startswith("Run one with: dpopt reproduce NAME")


def test_list_long_shows_full_descriptions(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    assert main(["list", "--long"]) == 0
    out = capsys.readouterr().out
    assert "description" in out and "source" in out
    assert registry.get("tour-mechanisms").seed_doc in out  # sources appear only in the long form


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["answer", "prefix:n=8", "h.csv", "--epsilon", "-1", "--delta", "1e-6"], "--epsilon: must be > 0"),
        (
            ["answer", "prefix:n=8", "h.csv", "--epsilon", "1", "--delta", "1.5"],
            "--delta: must lie in [0, 1)",
        ),
        (
            ["answer", "prefix:n=8", "h.csv", "--epsilon", "1e9", "--delta", "1e-6"],
            "--epsilon: must be at most",
        ),
        (["strategy", "prefix:n=8", "--out", "s.npz", "--tol", "-1"], "--tol: must be"),
        (["reproduce", "tour-mechanisms", "--set", "n_runs=5", "--out", "r"], "--set n_runs: must be"),
        (["strategy", "nope:n=8", "--out", "s.npz"], "workload spec 'nope:n=8': unknown workload"),
    ],
)
def test_errors_are_said_in_command_line_terms(
    argv: list[str], expected: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    monkeypatch.chdir(tmp_path)
    (tmp_path / "h.csv").write_text("1\n2\n3\n4\n5\n6\n7\n8\n")
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"dpopt: error: {expected}"), err
    assert "switch the noise off" not in err  # Python-API advice has no CLI meaning
    assert not (tmp_path / "r").exists()  # a bad --set is refused before a run folder exists
