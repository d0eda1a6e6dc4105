"""``dpopt list``: one line per experiment at 80 columns; ``--long`` adds the descriptions."""

from __future__ import annotations

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
